# SPDX-License-Identifier: MIT
"""The per-stage table `muster run` prints (src/cli/cmd_pipe.c), parsed
column by column so a test can check each value, not just that a word
appears somewhere in the output.

    rows = parse(stdout, PIPE_COLUMNS, nstages)
    rows[0]["resident"]          # "1.5 MiB"
    size_close(rows[0]["resident"], 1572864)

Sizes are printed as cli_bytes does: "%.0f B" below 1 KiB, else "%.1f
KiB|MiB|GiB|TiB"; times as "%.1f" / "%.2f".
"""

import re

import pytest

SIZE = r"\d+(?:\.\d)? (?:B|KiB|MiB|GiB|TiB)"
MS = r"\d+\.\d+"
UNITS = {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}

# `muster run --stages ...`
PIPE_COLUMNS = [("stage", r"\d+"), ("address", r"\S+:\d+"), ("load ms", MS),
                ("resident", SIZE), ("forward ms", MS), ("compute ms", MS), ("sent", SIZE),
                ("received", SIZE)]
# `muster run --tracker ...` and `muster demo`
CLUSTER_COLUMNS = [("stage", r"\d+"), ("device", r"\S+:\d+"), ("weights", r"local|streamed"),
                   ("nodes", r"\d+\.\.\d+"), ("load ms", MS), ("resident", SIZE),
                   ("forward ms", MS), ("sent", SIZE), ("received", SIZE)]


def parse(stdout, columns, nrows):
    """The table's nrows stage rows under its header row, as
    [{column: text}], plus "replacement": True/False for cluster rows.
    Fails unless there is exactly one header row with exactly these
    columns, followed by nrows rows whose every column holds a value of
    its kind, and no further stage row."""
    lines = stdout.splitlines()
    names = [name for name, _ in columns]
    header = re.compile(r"^\s*" + r"\s+".join(re.escape(n) for n in names) + r"\s*$")
    at = [i for i, line in enumerate(lines) if header.match(line)]
    if len(at) != 1:
        pytest.fail(f"want one table header with the columns {names}, found {len(at)}:\n"
                    f"{stdout}", pytrace=False)
    row = re.compile(r"^\s*" + r"\s+".join(f"(?P<c{i}>{rx})" for i, (_, rx)
                                           in enumerate(columns))
                     + r"(?P<replaced>\s+\(replacement\))?\s*$")
    rows = []
    for line in lines[at[0] + 1:at[0] + 1 + nrows]:
        m = row.match(line)
        if not m:
            pytest.fail(f"stage row {line!r} does not hold the columns {names}:\n{stdout}",
                        pytrace=False)
        values = {name: m.group(f"c{i}") for i, name in enumerate(names)}
        values["replacement"] = m.group("replaced") is not None
        rows.append(values)
    assert len(rows) == nrows, f"{len(rows)} stage rows, want {nrows}:\n{stdout}"
    after = lines[at[0] + 1 + nrows] if len(lines) > at[0] + 1 + nrows else ""
    assert not row.match(after), f"more than {nrows} stage rows:\n{stdout}"
    return rows


def size_bytes(text):
    value, unit = text.split()
    return float(value) * (1 << UNITS[unit])


def size_close(text, nbytes):
    """Is text what cli_bytes prints for nbytes (its unit, and its value
    to the printed digit)?"""
    value, unit = text.split()
    want, want_unit = float(nbytes), 0
    while want >= 1024 and want_unit < 4:
        want /= 1024
        want_unit += 1
    if UNITS[unit] != 10 * want_unit:
        return False
    return int(value) == nbytes if unit == "B" else abs(float(value) - want) <= 0.05 + 1e-9
