# SPDX-License-Identifier: MIT
"""Man pages come from the same option tables as --help (issue 17).

`muster help-man DIR` (what the build runs; `cmake --install` puts the
result in share/man/man1) writes muster.1 and one page per subcommand.
For every command `muster --help` lists (and each subcommand of those
whose --help lists subcommands instead of options), the page exists and
its OPTIONS are exactly the options its --help lists; each page renders
with `man -l` (man-db, scripts/deps.sh test) without a warning; muster.1
names every page. The installed tree has them under share/man/man1.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

OPT_HELP = re.compile(r"^  (--[a-z0-9-]+)", re.M)
OPT_MAN = re.compile(r'^\.BI? "\\-\\-([a-z0-9-]+)', re.M)
REPO = Path(__file__).resolve().parents[2]


def run(*argv, check=True):
    done = subprocess.run([str(a) for a in argv], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stderr}"
    return done


def command_paths(muster_bin):
    """Every command with its own option table, as argv after `muster`."""
    top = run(muster_bin, "--help").stdout
    names = re.findall(r"^  ([a-z][a-z-]*) ", top.split("commands:", 1)[1], re.M)
    assert "tracker" in names and "store" in names, top
    paths = []
    for name in names:
        if name == "version":
            continue
        text = run(muster_bin, name, "--help").stdout
        if "\noptions:\n" in text:
            paths.append([name])
            continue
        # a dispatcher: its --help lists subcommands ("usage: muster model gen|input")
        first = text.splitlines()[0]
        subs = re.match(rf"usage: muster {name} ([a-z|]+)", first)
        assert subs, f"muster {name} --help has neither options nor subcommands:\n{text}"
        paths += [[name, sub] for sub in subs.group(1).split("|")]
    return paths


@pytest.fixture(scope="module")
def pages(muster_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("man")
    run(muster_bin, "help-man", out)
    return out


def test_each_page_lists_exactly_the_help_options(muster_bin, pages):
    paths = command_paths(muster_bin)
    assert len(paths) >= 20, paths
    for path in paths:
        page = pages / ("muster-" + "-".join(path) + ".1")
        assert page.is_file(), f"no page for muster {' '.join(path)}"
        text = page.read_text()
        helped = OPT_HELP.findall(run(muster_bin, *path, "--help").stdout
                                  .split("\noptions:\n", 1)[1])
        manned = ["--" + o for o in OPT_MAN.findall(text)]
        assert helped and manned == helped, \
            f"muster {' '.join(path)}: --help {helped} but the page {manned}"
        # what --help-man prints is that page (its NAME line aside, which
        # help-man takes from `muster --help`'s list where it can)
        alone = run(muster_bin, *path, "--help-man").stdout
        assert alone.split(".SH SYNOPSIS")[1] == text.split(".SH SYNOPSIS")[1]


def test_pages_render_with_man(muster_bin, pages):
    names = sorted(p.name for p in pages.glob("*.1"))
    overview = (pages / "muster.1").read_text()
    for name in names:
        if name != "muster.1":
            assert f".BR {name[:-2]} (1)" in overview, f"muster.1 does not name {name}"
        env = {**os.environ, "MANWIDTH": "100", "LC_ALL": "C.UTF-8"}
        done = subprocess.run(["man", "--warnings", "-l", str(pages / name)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode == 0 and done.stderr == "", f"{name}: {done.stderr}"
        assert "OPTIONS" in done.stdout or name == "muster.1", done.stdout[:500]
    tracker = subprocess.run(["man", "-l", str(pages / "muster-tracker.1")],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "MANWIDTH": "200"}).stdout
    assert re.search(r"--drain-timeout SECONDS\n\s+on SIGTERM", tracker), tracker


def test_install_puts_them_in_man1(tmp_path):
    build = REPO / "build"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(tmp_path),
                    "--component", "Unspecified"], check=True, capture_output=True,
                   timeout=120)
    man1 = tmp_path / "share" / "man" / "man1"
    assert (man1 / "muster.1").is_file() and (man1 / "muster-store.1").is_file(), \
        sorted(os.listdir(tmp_path))
