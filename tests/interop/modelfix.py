# SPDX-License-Identifier: MIT
"""Fixtures for the model tests (test_onnx_convert.py, test_pipeline.py).
Kept out of conftest.py; a test module imports the ones it uses:

    from modelfix import hello_deepa, hello_deepa_model, model_cache

* `model_cache`: the directory downloaded and generated models are kept
  in across runs: `$MUSTER_MODEL_CACHE`, else `<repo>/build/model-cache`.
* `hello_deepa`: path of a real trained model, openWakeWord's
  hello_deepa.onnx (a 3-layer MLP with decomposed layer norms, 78,049
  params), from the npm package openwakeword-js@0.1.27. The first run
  fetches it with `npm pack` (bounded by NPM_TIMEOUT) and keeps the
  tarball and the extracted model in the cache; later runs use the cache
  and do not touch the network. The extracted file is checked against its
  SHA-256. Without npm or the registry the fixture FAILS with the reason:
  a missing model is never a silent skip (STYLE.md rule 12).
* `hello_deepa_model`: hello_deepa.onnx converted by tools/onnx2muster.py
  (a muster model directory, once per session).
* `big_model`: a generated MLP of BIG_MODEL_BYTES (1 GiB unless
  $MUSTER_BIG_MODEL_BYTES says otherwise) of F32 weights, written once into
  the cache (streamed, never held in memory) and reused while its recorded
  parameters match.

Helpers: `convert(onnx_path, outdir, *args)` runs the converter with
Debian's python (bounded), returning the CompletedProcess;
`ensure_hello_deepa(cache, npm)` is what the fixture calls.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mumodel  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"
CONVERTER = REPO / "tools" / "onnx2muster.py"
CONVERT_TIMEOUT = 120.0
NPM_TIMEOUT = 120.0

NPM_PACKAGE = "openwakeword-js"
NPM_VERSION = "0.1.27"
HELLO_MEMBER = "package/models/hello_deepa.onnx"
HELLO_SHA256 = "67ac357640e53b9d4713433a8ab48be4333f7cb21d6816406be7660ebe6d7614"

BIG_MODEL_BYTES = int(os.environ.get("MUSTER_BIG_MODEL_BYTES", 1 << 30))
BIG_MODEL_WIDTH = 4096


def cache_dir():
    path = Path(os.environ.get("MUSTER_MODEL_CACHE") or REPO / "build" / "model-cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def cache_lock(cache, name):
    """An exclusive lock on `cache/.name.lock`, so concurrent test runs
    do not fetch or generate the same thing at once."""
    with open(cache / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _npm_pack(npm, dest, package=NPM_PACKAGE, version=NPM_VERSION):
    """`npm pack PACKAGE@VERSION` into dest; returns the tarball's path or
    fails the test with npm's output."""
    spec = f"{package}@{version}"
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false",
               npm_config_audit="false", npm_config_loglevel="warn")
    try:
        proc = subprocess.run([npm, "pack", spec, "--fetch-retries=1"], cwd=dest, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`npm pack {spec}` did not finish within {NPM_TIMEOUT:.0f} s "
                    "(is the npm registry reachable?)", pytrace=False)
    except OSError as exc:
        pytest.fail(f"cannot run npm ({exc}): install it (apt-get install npm) to fetch "
                    f"{spec}", pytrace=False)
    # npm names the tarball after the package, "@scope/name" as "scope-name"
    tarball = dest / f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"
    if proc.returncode != 0 or not tarball.is_file():
        pytest.fail(f"`npm pack {spec}` failed (exit {proc.returncode}; is the npm registry "
                    f"reachable?):\n{proc.stderr[-3000:]}{proc.stdout[-1000:]}", pytrace=False)
    return tarball


def ensure_hello_deepa(cache, npm="npm"):
    """hello_deepa.onnx in `cache`: extracted from the cached tarball, or
    fetched with `npm pack` first. npm=None forbids fetching (the cache
    must already hold the tarball or the model)."""
    cache = Path(cache)
    folder = cache / f"{NPM_PACKAGE}-{NPM_VERSION}"
    model = folder / "hello_deepa.onnx"
    tarball = cache / f"{NPM_PACKAGE}-{NPM_VERSION}.tgz"
    with cache_lock(cache, "npm"):
        if model.is_file() and sha256(model) == HELLO_SHA256:
            return model
        if not tarball.is_file():
            if npm is None:
                pytest.fail(f"{tarball} is not cached and fetching was not allowed",
                            pytrace=False)
            npm_path = shutil.which(npm)
            if npm_path is None:
                pytest.fail(f"npm not found: install it (apt-get install npm) to fetch "
                            f"{NPM_PACKAGE}@{NPM_VERSION}", pytrace=False)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                got = _npm_pack(npm_path, Path(tmp))
                os.replace(got, tarball)
        folder.mkdir(exist_ok=True)
        try:
            with tarfile.open(tarball, "r:gz") as tf:
                src = tf.extractfile(HELLO_MEMBER)
                data = src.read() if src is not None else None
        except (tarfile.TarError, KeyError, OSError) as exc:
            tarball.unlink(missing_ok=True)     # fetch again next time
            pytest.fail(f"{tarball}: cannot extract {HELLO_MEMBER}: {exc}", pytrace=False)
        if data is None or hashlib.sha256(data).hexdigest() != HELLO_SHA256:
            tarball.unlink(missing_ok=True)
            pytest.fail(f"{HELLO_MEMBER} in {tarball} is not the expected file "
                        f"(SHA-256 {HELLO_SHA256}); removed the tarball", pytrace=False)
        tmp = model.with_suffix(".onnx.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, model)
        return model


def convert(onnx_path, outdir, *args, timeout=CONVERT_TIMEOUT):
    """Run tools/onnx2muster.py with Debian's python; the CompletedProcess
    (text output)."""
    try:
        return subprocess.run([PYTHON, str(CONVERTER), str(onnx_path), str(outdir)]
                              + [str(a) for a in args], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"onnx2muster did not finish within {timeout} s", pytrace=False)


@pytest.fixture(scope="session")
def model_cache():
    return cache_dir()


@pytest.fixture(scope="session")
def hello_deepa(model_cache):
    return ensure_hello_deepa(model_cache)


@pytest.fixture(scope="session")
def hello_deepa_model(hello_deepa, tmp_path_factory):
    out = tmp_path_factory.mktemp("hello_deepa") / "model"
    proc = convert(hello_deepa, out)
    if proc.returncode != 0:
        pytest.fail(f"onnx2muster failed on hello_deepa.onnx (exit {proc.returncode}):\n"
                    f"{proc.stderr}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def big_model(model_cache):
    """A mumodel.ModelInfo for the big generated MLP in the cache."""
    config = {"kind": "big_mlp", "total_bytes": BIG_MODEL_BYTES, "width": BIG_MODEL_WIDTH,
              "layers": mumodel.big_mlp_layers(BIG_MODEL_BYTES, BIG_MODEL_WIDTH),
              "batch": 1, "seed": 0}
    path = model_cache / f"big-mlp-{BIG_MODEL_BYTES >> 20}MiB"
    stamp = path / "config.json"
    with cache_lock(model_cache, path.name):
        current = json.loads(stamp.read_text()) if stamp.is_file() else None
        if current != config:
            shutil.rmtree(path, ignore_errors=True)
            tmp = model_cache / f"{path.name}.tmp.{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            mumodel.write_big_mlp(tmp, total_bytes=BIG_MODEL_BYTES, width=BIG_MODEL_WIDTH,
                                  batch=1, seed=0)
            (tmp / "config.json").write_text(json.dumps(config))
            os.replace(tmp, path)
    return mumodel.ModelInfo(str(path), mumodel.load_graph(path), config)
