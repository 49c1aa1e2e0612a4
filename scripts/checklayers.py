#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The layer check (STYLE.md 19, docs/internals/architecture.md).

The layers are the mu_layer(NAME DIR DEPS...) lines of CMakeLists.txt:
a file under src/DIR may include its own folder's headers and those of
the layers in DEPS, and of what they may include in turn, public headers
(include/muster/NAME.h is layer NAME's) as much as internal ones. Anything else
is an include that runs up the layers, or sideways between two folders
that do not build on each other, and fails the check.

src/cli (the command) is written on the public headers: its files may
include include/muster/*.h, the command's own headers (src/cli/...) and
core's (the runtime's support layer, shared with the command as curl's
curlx is with curl's tool), and nothing of a layer above core.

Usage: checklayers.py [ROOT]   (ROOT: the tree to check, default: this one)
Prints each offending include as FILE:LINE and exits 1 when there is one.
"""
import os
import re
import sys

LAYER = re.compile(r'^\s*mu_layer\(\s*(\w+)\s+([\w/]+)((?:\s+\w+)*)\s*\)', re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# the folders of src/cli may include these besides the public headers
CLI_ALLOWED = ('muster/', 'cli/', 'core/')
# include/muster/NAME.h belongs to layer NAME when there is one, else to
# core (common.h, stream.h, metrics.h, version.h); these are the others.
# llm.h is implemented in pipeline/llm: a model's handle reaches stages
# over the network and devices through a tracker, not only its decoder.
PUBLIC = {'model': 'graph', 'llm': 'pipeline_llm'}


def layers(root):
    """{name: (dir, [deps])} in the order CMakeLists.txt gives them."""
    with open(os.path.join(root, 'CMakeLists.txt')) as f:
        text = f.read()
    out = {}
    for m in LAYER.finditer(text):
        out[m.group(1)] = (m.group(2), m.group(3).split())
    return out


def closure(ls):
    """{name: set of folders its files may include}"""
    memo = {}

    def visit(n, path):
        if n in memo:
            return memo[n]
        if n in path:
            raise SystemExit('checklayers: the layers %s depend on each other' % ' -> '.join(path + [n]))
        d, deps = ls[n]
        seen = {d}
        for x in deps:
            if x not in ls:
                continue  # an optional layer this tree lacks
            seen |= visit(x, path + [n])
        memo[n] = seen
        return seen
    return {n: visit(n, []) for n in ls}


def owner(rel, dirs):
    """The layer whose folder holds src/REL: the longest folder that is a
    prefix (pipeline/llm before pipeline)."""
    best = None
    for name, d in dirs.items():
        if rel.startswith(d + '/') and (best is None or len(d) > len(dirs[best])):
            best = name
    return best


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), '..'))
    ls = layers(root)
    if not ls:
        print('checklayers: no mu_layer lines in CMakeLists.txt', file=sys.stderr)
        return 1
    may = closure(ls)
    dirs = {n: d for n, (d, _) in ls.items()}
    src = os.path.join(root, 'src')
    bad = 0
    nfiles = 0
    for top, _, names in os.walk(src):
        for fn in sorted(names):
            if not fn.endswith(('.c', '.h')):
                continue
            path = os.path.join(top, fn)
            rel = os.path.relpath(path, src)
            nfiles += 1
            with open(path, errors='replace') as f:
                text = f.read()
            cli = rel.startswith('cli/')
            mine = None if cli else owner(rel, dirs)
            if not cli and mine is None:
                print('src/%s: in no layer (add its folder to the mu_layer lines of CMakeLists.txt)'
                      % rel, file=sys.stderr)
                bad = 1
                continue
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                line = text.count('\n', 0, m.start()) + 1
                if '/' not in inc:
                    continue  # one beside the file
                if cli:
                    if not inc.startswith(CLI_ALLOWED):
                        print('src/%s:%d: includes "%s": the command uses the public headers '
                              '(include/muster/), its own and core\'s, not a library layer\'s'
                              % (rel, line, inc), file=sys.stderr)
                        bad = 1
                    continue
                if inc.startswith('muster/'):
                    stem = inc[len('muster/'):-len('.h')]
                    theirs = PUBLIC.get(stem, stem if stem in dirs else 'core')
                else:
                    theirs = owner(inc, dirs)
                if theirs is None:
                    continue  # a system header spelled with quotes
                if dirs[theirs] not in may[mine]:
                    print('src/%s:%d: includes "%s": layer %s (src/%s) does not build on %s (src/%s); '
                          'see docs/internals/architecture.md'
                          % (rel, line, inc, mine, dirs[mine], theirs, dirs[theirs]), file=sys.stderr)
                    bad = 1
    if not bad:
        print('checklayers: ok (%d files, %d layers)' % (nfiles, len(ls)))
    return bad


if __name__ == '__main__':
    sys.exit(main())
