# SPDX-License-Identifier: MIT
"""The layer check (scripts/checklayers.py, run by scripts/checksrc.sh in
`make check`) on this tree, and on copies of it with a bad include planted:
an include that runs up the layers, one sideways between two folders that
do not build on each other, an upward public header, a command file that
includes a library-internal header, and a folder that is in no layer. Each
must fail the check with the planted line named, and the clean tree must
pass.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "checklayers.py"


def run(root):
    p = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def tree(tmp_path):
    """A copy of what the check reads: CMakeLists.txt and src/."""
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(REPO / "CMakeLists.txt", root / "CMakeLists.txt")
    shutil.copytree(REPO / "src", root / "src")
    return root


def plant(root, rel, line):
    """Add `line` after the first #include of src/REL; its line number."""
    path = root / "src" / rel
    lines = path.read_text().split("\n")
    at = next(i for i, s in enumerate(lines) if s.startswith("#include")) + 1
    lines.insert(at, line)
    path.write_text("\n".join(lines))
    return at + 1


def test_this_tree_passes():
    rc, out = run(REPO)
    assert rc == 0, out
    assert "checklayers: ok" in out


@pytest.mark.parametrize("rel, inc, why", [
    # up: the tokenizers do not build on the decoder
    ("tok/tok.c", '#include "llm/llm_int.h"', "layer tok (src/tok) does not build on llm"),
    # up, through a public header: core builds on nothing
    ("core/buf.c", '#include "muster/pipeline.h"', "layer core (src/core) does not build on pipeline"),
    # sideways: the tracker and the store are peers of one rank
    ("tracker/sched.c", '#include "store/kv_int.h"', "layer tracker (src/tracker) does not build on store"),
    # the common pipeline layer is below its stage kinds
    ("pipeline/msg.c", '#include "pipeline/llm/engine_int.h"',
     "layer pipeline (src/pipeline) does not build on pipeline_llm"),
    # the command is written on the public headers
    ("cli/main.c", '#include "llm/llm_int.h"', "the command uses the public headers"),
    ("cli/demo/cmd_demo.c", '#include "pipeline/stage_int.h"', "the command uses the public headers"),
])
def test_planted_include_fails(tree, rel, inc, why):
    line = plant(tree, rel, inc)
    rc, out = run(tree)
    assert rc == 1, out
    want = "src/%s:%d: includes \"%s\"" % (rel, line, inc.split('"')[1])
    hit = [s for s in out.splitlines() if s.startswith(want)]
    assert hit, "%s not reported:\n%s" % (want, out)
    assert why in hit[0], hit[0]


def test_allowed_includes_pass(tree):
    """Downward includes, public or internal, are not reported."""
    plant(tree, "llm/dec.c", '#include "tok/tok_int.h"')
    plant(tree, "pipeline/llm/stage.c", '#include "pipeline/msg_int.h"')
    plant(tree, "cli/main.c", '#include "muster/pipeline.h"')
    plant(tree, "cli/main.c", '#include "core/buf_int.h"')
    rc, out = run(tree)
    assert rc == 0, out


def test_folder_in_no_layer_fails(tree):
    (tree / "src" / "newthing").mkdir()
    (tree / "src" / "newthing" / "a.c").write_text("/* SPDX-License-Identifier: MIT */\n")
    rc, out = run(tree)
    assert rc == 1
    assert "src/newthing/a.c: in no layer" in out


def test_layers_that_depend_on_each_other_fail(tree):
    cm = tree / "CMakeLists.txt"
    text = cm.read_text().replace("mu_layer(core          core)",
                                  "mu_layer(core          core          llm)")
    assert text != cm.read_text()
    cm.write_text(text)
    rc, out = run(tree)
    assert rc != 0
    assert "depend on each other" in out


# Names a lower layer may use from a higher one on purpose: the list of
# stage kinds (pipeline/stage.c) names each kind's table, which the kinds'
# folders define, so that the common code reaches them without including
# anything of theirs (docs/internals/architecture.md).
LINK_UP_ALLOWED = {"mu__stage_kind_graph", "mu__stage_kind_llm"}


def test_no_layer_calls_up(muster_bin):
    """What includes cannot show: a call into a layer the caller does not
    build on (a function declared by hand, or reached through a header of
    its own folder). Read from the object files of the build that made
    MUSTER_BIN: each layer's undefined symbols must be defined in a layer
    it builds on."""
    build = Path(muster_bin).resolve().parents[1]
    sys.path.insert(0, str(REPO / "scripts"))
    import checklayers
    ls = checklayers.layers(REPO)
    may = checklayers.closure(ls)
    dirs = {n: d for n, (d, _) in ls.items()}
    defined, used = {}, {}
    for name in ls:
        top = build / "CMakeFiles" / ("mu_%s.dir" % name)
        # an object whose source is gone is a build's leftover, not code
        objs = sorted(o for o in top.rglob("*.o")
                      if (REPO / str(o.relative_to(top))[:-2]).exists())
        if name not in ("etcd",):
            assert objs, "no objects of layer %s under %s" % (name, build)
        for o in objs:
            out = subprocess.run(["nm", str(o)], capture_output=True, text=True,
                                 check=True).stdout
            for line in out.splitlines():
                f = line.split()
                if len(f) == 3 and f[1] in "TDRBC":
                    defined[f[2]] = name
                elif len(f) == 2 and f[0] == "U":
                    used.setdefault(name, set()).add((f[1], o.name))
    bad = ["%s (%s) uses %s of layer %s" % (n, o, sym, defined[sym])
           for n, syms in used.items() for sym, o in sorted(syms)
           if sym in defined and dirs[defined[sym]] not in may[n] and sym not in LINK_UP_ALLOWED]
    assert not bad, "\n".join(bad)
