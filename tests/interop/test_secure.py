# SPDX-License-Identifier: MIT
"""Security on muster's own protocols (docs/security.md): the shared-secret
handshake and TLS on stage sessions (`muster stage` / `muster run
--stages`), on device sessions through a tracker (`muster server` /
`muster request`), and end to end in `muster demo`.

Certificates are made here with `openssl req` and `openssl x509` (a CA,
a second CA nobody trusts, a server certificate for 127.0.0.1, one that
expired yesterday via `-days -1`, one for another name), so the test
needs only Debian's openssl. What users rely on:

* the right secret and certificates work, and the outputs are the model's;
* a client without the secret, with a wrong one, without TLS, trusting
  another CA, or given an expired or wrong-name certificate is refused,
  with the reason on its stderr and the refusal in the server's log with
  the client's address;
* the secret never crosses the wire (a relay records the bytes);
* mutual TLS: a server given --tls-ca refuses a client with no certificate;
* every server that listens beyond loopback with nothing that keeps
  strangers out warns once at start (docs/deploy.md's rule), and one on
  loopback, or protected, does not.
"""

import os
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import mumodel
import stagefix
from storefix import muster_store  # noqa: F401 (a fixture)
from conftest import HOST, REPO

RUN_TIMEOUT = 60.0
ENV = dict(os.environ)
ENV.setdefault("OPENBLAS_NUM_THREADS", "1")
ENV.pop("MUSTER_SECRET_FILE", None)


def openssl(*args):
    proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        pytest.fail(f"openssl {' '.join(map(str, args))} failed: {proc.stderr}",
                    pytrace=False)


class Pki:
    """The files of one test module's certificates and secrets."""

    def __init__(self, d):
        self.d = d
        self.ca, self.ca_key = self.make_ca("ca")
        self.other_ca, self.other_key = self.make_ca("other")
        self.cert, self.key = self.issue("server", "IP:127.0.0.1,DNS:localhost")
        self.expired, self.expired_key = self.issue("expired", "IP:127.0.0.1", days=-1)
        self.wrong_name, self.wrong_name_key = self.issue("wrongname", "DNS:elsewhere.example")
        self.secret = self.write_secret("secret", os.urandom(24).hex())
        self.wrong = self.write_secret("wrong", os.urandom(24).hex())

    def make_ca(self, name):
        cert, key = self.d / f"{name}.pem", self.d / f"{name}.key"
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-keyout", key, "-out", cert, "-days", 2, "-subj", f"/CN={name} CA")
        return cert, key

    def issue(self, name, san, days=2):
        cert, key, csr = (self.d / f"{name}.pem", self.d / f"{name}.key",
                          self.d / f"{name}.csr")
        ext = self.d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                "-CAcreateserial", "-days", days, "-extfile", ext, "-out", cert)
        return cert, key

    def write_secret(self, name, text):
        path = self.d / name
        path.write_text(text + "\n")
        path.chmod(0o600)
        return path

    def tls(self, cert=None, key=None, ca=None):
        """--tls-* flags: the server certificate and CA by default."""
        return ["--tls-cert", cert or self.cert, "--tls-key", key or self.key,
                "--tls-ca", ca or self.ca]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return mumodel.write_mlp(tmp_path_factory.mktemp("mlp") / "mlp", widths=(16, 32, 8),
                             batch=2, seed=3)


@pytest.fixture
def stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def muster(muster_bin, *args, timeout=RUN_TIMEOUT, stdin=None):
    try:
        return subprocess.run([str(muster_bin)] + [str(a) for a in args], input=stdin,
                              capture_output=True, timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`muster {' '.join(map(str, args))}` did not finish within {timeout} s;"
                    f" stderr:\n{exc.stderr}", pytrace=False)


def run(muster_bin, tmp_path, mlp, stage, *extra):
    """`muster run --stages` over one stage; (CompletedProcess, outputs)."""
    src, out = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    mumodel.write_safetensors(src, mlp.inputs(seed=1))
    if out.exists():
        out.unlink()
    proc = muster(muster_bin, "run", "--model", mlp.path, "--input", src, "--output", out,
                  "--stages", stage.address, "--connect-timeout", 2, "--io-timeout", 10,
                  *extra)
    return proc, (mumodel.read_safetensors(out) if proc.returncode == 0 else None)


def check_same(muster_bin, tmp_path, mlp, got):
    """The outputs equal the model run in one process."""
    src, ref = tmp_path / "in.safetensors", tmp_path / "ref.safetensors"
    proc = muster(muster_bin, "run", "--model", mlp.path, "--input", src, "--output", ref)
    assert proc.returncode == 0, proc.stderr
    want = mumodel.read_safetensors(ref)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def refused(proc, stage, client_words, server_words):
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, err
    assert re.search(client_words, err, re.I), err
    stage_log = stagefix_wait(stage, server_words)
    assert re.search(rf"{re.escape(HOST)}:\d+", stage_log), stage_log


def stagefix_wait(stage, pattern, timeout=10.0):
    """The stage's log once a line matches pattern (its refusal is logged
    as the connection closes, maybe just after the client exits)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        for line in stage.log().splitlines():
            if re.search(pattern, line, re.I):
                return line
        if time.monotonic() > deadline:
            pytest.fail(f"no line matching {pattern!r} in the stage's log:\n{stage.log()}",
                        pytrace=False)
        time.sleep(0.05)


# --------------------------------------------------------------------------
# shared secret
# --------------------------------------------------------------------------

def test_secret_stage_run(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--secret-file", pki.secret)
    proc, got = run(muster_bin, tmp_path, mlp, stage, "--secret-file", pki.secret)
    assert proc.returncode == 0, proc.stderr
    check_same(muster_bin, tmp_path, mlp, got)


def test_secret_from_environment(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--secret-file", pki.secret)
    ENV["MUSTER_SECRET_FILE"] = str(pki.secret)
    try:
        proc, got = run(muster_bin, tmp_path, mlp, stage)
    finally:
        del ENV["MUSTER_SECRET_FILE"]
    assert proc.returncode == 0, proc.stderr


def test_missing_secret_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--secret-file", pki.secret)
    proc, _ = run(muster_bin, tmp_path, mlp, stage)
    refused(proc, stage, r"authentication failed",
            r"refused 127\.0\.0\.1:\d+: this server requires the shared-secret handshake")


def test_wrong_secret_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--secret-file", pki.secret)
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--secret-file", pki.wrong)
    refused(proc, stage, r"authentication failed",
            r"refused 127\.0\.0\.1:\d+: .*does not hold this shared secret")


def test_secret_file_checked_at_start(muster_bin, tmp_path, mlp):
    short = tmp_path / "short"
    short.write_text("too short\n")
    proc = muster(muster_bin, "stage", "--model", mlp.path, "--stage", 0, "--of", 1,
                  "--port", 0, "--secret-file", short)
    assert proc.returncode == 2
    assert b"16 to" in proc.stderr
    proc = muster(muster_bin, "stage", "--model", mlp.path, "--stage", 0, "--of", 1,
                  "--port", 0, "--secret-file", tmp_path / "none")
    assert proc.returncode == 2 and b"No such file" in proc.stderr


class Recorder:
    """A loopback relay that keeps every byte it carries, both ways."""

    def __init__(self, target):
        self.target, self.data = target, bytearray()
        self.lock = threading.Lock()
        self.srv = socket.create_server((HOST, 0))
        self.port = self.srv.getsockname()[1]
        self.address = f"{HOST}:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection((HOST, self.target))
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                with self.lock:
                    self.data += data
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.srv.close()


def test_secret_never_on_the_wire(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--secret-file", pki.secret)
    rec = Recorder(stage.port)
    try:
        relayed = type("S", (), {"address": rec.address})
        proc, got = run(muster_bin, tmp_path, mlp, relayed, "--secret-file", pki.secret)
        assert proc.returncode == 0, proc.stderr
        secret = pki.secret.read_text().strip().encode()
        with rec.lock:
            wire = bytes(rec.data)
        assert b"MUAU" in wire               # the handshake did cross ...
        assert len(wire) > 200
        for piece in (secret, secret[:12], secret[-12:]):
            assert piece not in wire         # ... but not the secret
    finally:
        rec.close()


# --------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------

def test_tls_stage_run(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, *pki.tls(), "--secret-file", pki.secret)
    proc, got = run(muster_bin, tmp_path, mlp, stage, *pki.tls(), "--secret-file", pki.secret)
    assert proc.returncode == 0, proc.stderr
    check_same(muster_bin, tmp_path, mlp, got)


def test_tls_plain_client_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--tls-cert", pki.cert, "--tls-key", pki.key)
    proc, _ = run(muster_bin, tmp_path, mlp, stage)
    refused(proc, stage, r"TLS", r"handshake from 127\.0\.0\.1:\d+ failed: the client does "
            r"not speak TLS")


def test_secret_only_client_told_the_stage_speaks_tls(muster_bin, tmp_path, pki, mlp, stages):
    """A client with the secret but no TLS, at a stage with both: it is
    told the stage speaks TLS (and which flag it lacks), not that the
    secret failed, which it did not."""
    stage, = stages(mlp.path, 1, *pki.tls(), "--secret-file", pki.secret)
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--secret-file", pki.secret)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, err
    assert re.search(r"speaks TLS.*--tls-ca", err), err
    assert "authentication failed" not in err, err
    stagefix_wait(stage, r"handshake from 127\.0\.0\.1:\d+ failed: the client does not speak TLS")


def test_tls_wrong_ca_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--tls-cert", pki.cert, "--tls-key", pki.key)
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--tls-ca", pki.other_ca)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1
    assert re.search(r"TLS", err), err
    stagefix_wait(stage, r"handshake from 127\.0\.0\.1:\d+ failed")


def test_tls_expired_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--tls-cert", pki.expired, "--tls-key", pki.expired_key)
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--tls-ca", pki.ca)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1
    assert re.search(r"certificate has expired", err), err


def test_tls_wrong_name_refused(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, "--tls-cert", pki.wrong_name, "--tls-key",
                    pki.wrong_name_key)
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--tls-ca", pki.ca)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1
    assert re.search(r"mismatch", err), err


def test_mutual_tls_needs_client_certificate(muster_bin, tmp_path, pki, mlp, stages):
    stage, = stages(mlp.path, 1, *pki.tls())
    proc, _ = run(muster_bin, tmp_path, mlp, stage, "--tls-ca", pki.ca)
    assert proc.returncode == 1
    stagefix_wait(stage, r"handshake from 127\.0\.0\.1:\d+ failed: .*certificate")
    proc, got = run(muster_bin, tmp_path, mlp, stage, *pki.tls())
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------
# device sessions through a tracker, and the demo
# --------------------------------------------------------------------------

def test_device_session_secret_and_tls(muster_bin, pki, muster_tracker, muster_server):
    tracker = muster_tracker()
    flags = [*pki.tls(), "--secret-file", pki.secret]
    server = muster_server(*flags, tracker=tracker, key="sec")
    proc = muster(muster_bin, "request", "sec", "--tracker", tracker.address, *flags,
                  stdin=b"hello over TLS\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"hello over TLS\n"
    server.wait_offers(2)
    proc = muster(muster_bin, "request", "sec", "--tracker", tracker.address, *pki.tls(),
                  "--retries", 1, "--timeout", 10, stdin=b"x")
    assert proc.returncode == 1
    assert b"authentication failed" in proc.stderr, proc.stderr
    server.wait_log(re.compile(r"refused 127\.0\.0\.1:\d+: this server requires"))


def test_demo_secret_and_tls(muster_bin, tmp_path, pki):
    flags = ["--secret-file", pki.secret, *pki.tls()]
    proc = muster(muster_bin, "demo", "--mlp", *flags, timeout=180)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out + proc.stderr.decode(errors="replace")
    assert re.search(r"\$ muster server .*--secret-file .*--tls-cert", out), out
    assert "Done." in out
    # the same run trusting another CA cannot reach its own devices: TLS
    # really is in the way
    bad = ["--secret-file", pki.secret, *pki.tls(ca=pki.other_ca)]
    proc = muster(muster_bin, "demo", "--mlp", *bad, timeout=180)
    assert proc.returncode == 1


# --------------------------------------------------------------------------
# --allow on the tracker and the store (their protocols cannot change)
# --------------------------------------------------------------------------

def still_open(port, timeout=0.5):
    """Connect, send nothing: True when the server keeps the connection."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.settimeout(timeout)
        try:
            return s.recv(1) != b""
        except TimeoutError:
            return True
        except ConnectionResetError:
            return False


def wait_line(read_log, pattern, timeout=10.0):
    import time
    deadline = time.monotonic() + timeout
    while not re.search(pattern, read_log()):
        if time.monotonic() > deadline:
            pytest.fail(f"no {pattern!r} in the log:\n{read_log()}", pytrace=False)
        time.sleep(0.05)


def test_tracker_allow(muster_tracker):
    import tvmpeer
    closed = muster_tracker("--allow", "10.0.0.0/8,fd00::/8")
    assert not still_open(closed.port)
    assert not still_open(closed.port)
    wait_line(closed.log_text, r"refused 127\.0\.0\.1:\d+: not in --allow \(2 refused so far\)")
    opened = muster_tracker("--allow", "10.0.0.0/8,127.0.0.0/8")
    assert still_open(opened.port)
    with tvmpeer.TrackerSession(opened.host, opened.port, 5) as ts:
        assert "queue_info" in ts.summary()


def test_store_allow(muster_store):
    closed = muster_store("--allow", "192.0.2.0/24")
    assert not still_open(closed.port)
    wait_line(closed.log_text, r"refused 127\.0\.0\.1:\d+: not in --allow")
    opened = muster_store("--allow", "192.0.2.0/24,127.0.0.1")
    assert still_open(opened.port)


def test_allow_checked_at_start(muster_bin):
    for cmd in ("tracker", "store"):
        proc = muster(muster_bin, cmd, "--port", 0, "--allow", "10.0.0.0/8,localhost")
        assert proc.returncode == 2
        assert b"\"localhost\" is not an address" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------
# listening beyond loopback
# --------------------------------------------------------------------------

GGUF = REPO / "models" / "stories260K" / "stories260K.gguf"
READY = r"Bind to|serving on|listening on|registered|Offering|serving metrics"


def warnings_at_start(muster_bin, tmp_path, args, ready):
    """Start `muster ARGS`, wait until its output matches ready, stop it;
    its WARNING lines."""
    log = tmp_path / "out.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(muster_bin), *map(str, args)], stdin=subprocess.DEVNULL,
                                stdout=f, stderr=f, env=ENV)
    try:
        deadline = time.monotonic() + 30
        while not re.search(ready, log.read_text(errors="replace")):
            assert proc.poll() is None, f"{args} exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{args} never matched {ready}:\n{log.read_text()}"
            time.sleep(0.05)
        time.sleep(0.3)  # a warning comes with the start, not later
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return [line for line in log.read_text().splitlines() if " WARNING " in line]


def test_listeners_beyond_loopback_warn(muster_bin, tmp_path, pki):
    open_ = "0.0.0.0"
    secret = ["--secret-file", pki.secret]
    stage = ["stage", "--model", GGUF, "--stage", 0, "--of", 1, "--port", 0]
    serve = ["serve", "--model", GGUF]
    cases = [
        # (args, what it waits for, the warnings it must give, as regexes)
        (["tracker", "--host", open_, "--port", 0], r"Bind to",
         [r"tracker: listening on 0\.0\.0\.0:\d+, beyond loopback: TVM's tracker protocol "
          r"has no authentication.*--allow"]),
        (["tracker", "--host", open_, "--port", 0, "--allow", "10.0.0.0/8"], r"Bind to", []),
        (["tracker", "--host", HOST, "--port", 0, "--metrics", f"{open_}:0"], r"Bind to",
         [r"metrics: listening on 0\.0\.0\.0:\d+, beyond loopback: the metrics endpoint"]),
        (["store", "--host", open_, "--port", 0], r"listening|Bind|serving|store",
         [r"store: listening on 0\.0\.0\.0:\d+, beyond loopback: torch's TCPStore"]),
        (["server", "--port", 0], r"serving sessions|published",
         [r"server: listening on 0\.0\.0\.0:\d+, beyond loopback: it has neither "
          r"--secret-file nor --tls-ca",
          r"server: listening on 0\.0\.0\.0:\d+, beyond loopback: the metadata \(md\) "
          r"listener has no authentication.*--md-port"]),
        (["server", "--port", 0, *secret], r"serving sessions|published",
         [r"server: listening on 0\.0\.0\.0:\d+, beyond loopback: the metadata \(md\)"]),
        (["server", "--host", HOST, "--port", 0], r"serving sessions|published", []),
        ([*stage, "--host", open_], r"serving on",
         [r"stage: listening on 0\.0\.0\.0:\d+, beyond loopback: it has neither"]),
        ([*stage, "--host", open_, *secret], r"serving on", []),
        ([*stage], r"serving on", []),
        ([*serve, "--listen", f"{open_}:0"], r"listening on",
         [r"serve: listening on 0\.0\.0\.0:\d+, beyond loopback: it has no --api-key-file"]),
        ([*serve, "--listen", f"{HOST}:0"], r"listening on", []),
    ]
    for args, ready, want in cases:
        got = warnings_at_start(muster_bin, tmp_path, args, ready)
        assert len(got) == len(want), f"muster {args}: {got}"
        for line, pattern in zip(got, want):
            assert re.search(pattern, line), f"muster {args}: {line!r} !~ {pattern}"
