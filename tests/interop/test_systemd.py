# SPDX-License-Identifier: MIT
"""The systemd units (systemd/*.service.in, configured into the build):

* `systemd-analyze verify` passes on each (the templates as an instance),
  and fails on a unit we break on purpose, so the check can fail;
* each runs as the muster user with the hardening the issue asks for,
  reads its environment file in /etc/default/, and allows the address
  families the servers use;
* a command built with libsystemd tells systemd READY=1 once it serves and
  STOPPING=1 on SIGTERM (Type=notify): checked through $NOTIFY_SOCKET, as
  systemd does it;
* the /etc/default files the units read are installed (and packaged), the
  command takes every option they give (and the examples beside them), and
  they follow the binding rule of docs/deploy.md: tracker, store and
  server on every address as the programs they stand in for, a stage on
  loopback unless it has a secret, metrics on loopback.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess

import pytest

from conftest import HOST, REPO

UNITS = {"muster-tracker.service": "muster-tracker.service",
         "muster-store.service": "muster-store.service",
         "muster-server@.service": "muster-server@demo.service",
         "muster-stage@.service": "muster-stage@s0.service"}
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"


def built_unit(name):
    path = REPO / "build" / "systemd" / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: configure the build (cmake -S . -B build)")
    return path.read_text()


def verify(tmp_path, muster_bin, name, text):
    """systemd-analyze verify on text, with ExecStart pointing at this
    build's muster (verify checks that the command exists)."""
    text = re.sub(r"^ExecStart=\S+/muster ", f"ExecStart={muster_bin} ", text, flags=re.M)
    path = tmp_path / name
    path.write_text(text)
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("template", sorted(UNITS))
def test_unit_verifies_and_is_hardened(muster_bin, tmp_path, template):
    text = built_unit(template)
    out = verify(tmp_path, muster_bin, UNITS[template], text)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr + out.stdout
    for line in ("User=muster", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "PrivateTmp=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                 "ExecReload=/bin/kill -HUP $MAINPID", "WantedBy=multi-user.target"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), f"{template} lacks {line}"
    base = template.split("@")[0].split(".")[0]
    assert f"EnvironmentFile=-/etc/default/{base}\n" in text
    if "@" in template:
        assert f"EnvironmentFile=-/etc/default/{base}-%i\n" in text
    assert re.search(r"^Type=(notify|simple)$", text, re.M)


def test_a_broken_unit_fails_verify(muster_bin, tmp_path):
    text = built_unit("muster-tracker.service").replace("ProtectSystem=strict",
                                                        "ProtectSystem=sometimes")
    out = verify(tmp_path, muster_bin, "muster-tracker.service", text)
    # verify warns (and exits 0) on a bad value: the check above treats
    # any output as a failure, so this must give some
    assert out.returncode != 0 or "protect system" in out.stderr, out.stderr


def test_notify_ready_and_stopping(muster_bin, tmp_path):
    if "Type=notify" not in built_unit("muster-tracker.service"):
        pytest.fail("the build found no libsystemd (libsystemd-dev): the units are "
                    "Type=simple and nothing notifies; scripts/deps.sh build installs it")
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    env = {**os.environ, "NOTIFY_SOCKET": path}
    proc = subprocess.Popen([str(muster_bin), "tracker", "--host", HOST, "--port", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        msg = sock.recv(4096).decode()
        assert "READY=1" in msg.split("\n"), msg
        assert "STATUS=" in msg
        proc.send_signal(signal.SIGTERM)
        msg = sock.recv(4096).decode()
        assert "STOPPING=1" in msg.split("\n"), msg
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.wait()
        sock.close()


DEFAULTS = {"muster-tracker": ["tracker"], "muster-store": ["store"],
            "muster-server": ["server", "--key", "demo"], "muster-stage": ["stage"]}
LOOPBACK = re.compile(r"^(127\.|::1$|localhost$)")


def default_lines(name):
    """The options of /etc/default/NAME: the setting, then each example."""
    text = (REPO / "systemd" / f"default-{name}").read_text()
    var = name.upper().replace("-", "_") + "_OPTS"
    lines = re.findall(rf'^(?:# e\.g\. )?{var}="([^"]*)"$', text, re.M)
    assert len(re.findall(rf"^{var}=", text, re.M)) == 1, f"{name}: no single {var}=: {text}"
    return [shlex.split(line) for line in lines]


def opt(args, name):
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_default_files_take_and_follow_the_rule(muster_bin, name):
    for args in default_lines(name):
        done = subprocess.run([str(muster_bin), *DEFAULTS[name], *args, "--help"],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{name}: {args}: {done.stderr}"
        host = opt(args, "--host")
        metrics = opt(args, "--metrics")
        assert metrics is None or LOOPBACK.match(metrics.rsplit(":", 1)[0]), (name, args)
        if name == "muster-stage":
            assert host is None or LOOPBACK.match(host) or "--secret-file" in args, \
                f"a stage beyond loopback without a secret: {args}"
        elif name in ("muster-tracker", "muster-store"):
            assert host in (None, "0.0.0.0", "::"), (name, args)
        if name == "muster-server" and "--secret-file" in args:
            assert "--md-port" in args, "a deployed device pins its md port for the firewall"


def test_default_files_are_installed_and_packaged(tmp_path):
    build = REPO / "build"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    for name in DEFAULTS:
        got = tmp_path / "etc" / "default" / name
        assert got.is_file(), sorted(p.name for p in (tmp_path / "etc").rglob("*"))
        assert got.read_text() == (REPO / "systemd" / f"default-{name}").read_text()
    assert "etc/default" in (REPO / "debian" / "muster.install").read_text().split()
    assert "-DMU_SYSCONFDIR=/etc" in (REPO / "debian" / "rules").read_text()
