# SPDX-License-Identifier: MIT
"""Man pages come from the same option tables as --help (issue 17).

`muster help-man DIR` (what the build runs; `cmake --install` puts the
result in share/man/man1) writes muster.1 and one page per subcommand.
For every command `muster --help` lists (and each subcommand of those
whose --help lists subcommands instead of options), the page exists and
its OPTIONS are exactly the options its --help lists, and its ALIASES
exactly the old spellings --help's last line names (each still accepted,
none listed among the options); each page renders with `man -l` (man-db,
scripts/deps.sh test) without a warning; muster.1 names every page. The
installed tree has them under share/man/man1.

The options speak one vocabulary (src/cli/cli_int.h): no command lists an
old spelling, `--stages` is always addresses (a count is `--of N`), and
`plan` and `stage`, which take graph models and LLM checkpoints alike,
say so of --model.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

OPT_HELP = re.compile(r"^  (--[a-z0-9-]+)", re.M)
OPT_MAN = re.compile(r'^\.BI? "\\-\\-([a-z0-9-]+)', re.M)
ALIAS_HELP = re.compile(r"--([a-z0-9-]+) for --([a-z0-9-]+)")
ALIAS_MAN = re.compile(r'^\.B "\\-\\-([a-z0-9-]+)"\nthe same as \\fB\\-\\-([a-z0-9-]+)\\fR$', re.M)
# spellings replaced by the one vocabulary: each survives only as an alias
OLD = {"silent": "quiet", "max-conns": "max-connections", "max-frame-bytes": "max-frame",
       "request-timeout": None}
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


def section(text, name):
    """A man page's section .SH NAME, up to the next .SH ("" without it)."""
    m = re.search(rf"^\.SH {name}\n(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def help_parts(muster_bin, path):
    """(options, {alias: option}) from `muster PATH --help`."""
    text = run(muster_bin, *path, "--help").stdout.split("\noptions:\n", 1)[1]
    opts, _, rest = text.partition("\nold spellings, still accepted:")
    return OPT_HELP.findall(opts), dict(ALIAS_HELP.findall(rest))


def test_each_page_lists_exactly_the_help_options(muster_bin, pages):
    paths = command_paths(muster_bin)
    assert len(paths) >= 20, paths
    for path in paths:
        page = pages / ("muster-" + "-".join(path) + ".1")
        assert page.is_file(), f"no page for muster {' '.join(path)}"
        text = page.read_text()
        helped, aliases = help_parts(muster_bin, path)
        manned = ["--" + o for o in OPT_MAN.findall(section(text, "OPTIONS"))]
        assert helped and manned == helped, \
            f"muster {' '.join(path)}: --help {helped} but the page {manned}"
        assert dict(ALIAS_MAN.findall(section(text, "ALIASES"))) == aliases, \
            f"muster {' '.join(path)}: --help's aliases {aliases}, the page's:\n{text}"
        # what --help-man prints is that page (its NAME line aside, which
        # help-man takes from `muster --help`'s list where it can)
        alone = run(muster_bin, *path, "--help-man").stdout
        assert alone.split(".SH SYNOPSIS")[1] == text.split(".SH SYNOPSIS")[1]


def test_aliases_work_and_stay_out_of_the_options(muster_bin):
    """Each old spelling is accepted where --help says, as the option it
    names (a value where that takes one); no command lists one as an
    option; the aliases this issue made are there."""
    seen = {}
    for path in command_paths(muster_bin):
        helped, aliases = help_parts(muster_bin, path)
        text = run(muster_bin, *path, "--help").stdout
        for old, new in aliases.items():
            assert f"--{new}" in helped, (path, old, new)
            assert f"--{old}" not in helped, (path, old)
            takes = re.search(rf"^  --{new} \S", text, re.M) is not None
            args = [f"--{old}", "1"] if takes else [f"--{old}"]
            done = run(muster_bin, *path, *args, "--help", check=False)
            assert done.returncode == 0, (path, args, done.stderr)
            seen[(path[0], old)] = new
        for o in helped:
            assert o[2:] not in OLD, f"muster {' '.join(path)} lists the old spelling {o}"
        assert not re.search(r"^  --stages N\b", text, re.M), \
            f"muster {' '.join(path)}: --stages is addresses; a count is --of N"
    for cmd, old, new in [("tracker", "silent", "quiet"), ("server", "silent", "quiet"),
                          ("store", "silent", "quiet"), ("tracker", "timeout", "io-timeout"),
                          ("store", "request-timeout", "io-timeout"),
                          ("run", "request-timeout", "device-timeout"),
                          ("stage", "max-conns", "max-connections"),
                          ("stage", "max-frame-bytes", "max-frame"), ("plan", "stages", "of"),
                          ("bench", "stages", "of")]:
        assert seen.get((cmd, old)) == new, (cmd, old, seen)
    for cmd in ("plan", "stage"):
        text = run(muster_bin, cmd, "--help").stdout
        assert re.search(r"^  --model PATH .*directory.*(GGUF|LLM)", text, re.M), text
    for cmd in ("generate", "serve", "run"):
        assert "--device-timeout SECONDS" in run(muster_bin, cmd, "--help").stdout, cmd


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
