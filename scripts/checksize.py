#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sizes (STYLE.md 6, docs/internals/architecture.md): no .c file under
src/ over 700 lines, and no function over 100 lines. A table (an
initialised array or struct at file scope) is not a function and is not
counted.

A function is found the way our style writes one: its name and
parameters start a line at column 0 and its body opens with "{" alone at
column 0 and closes with "}" alone at column 0.

Usage: checksize.py [ROOT]. Prints each offender and exits 1 if any.
"""
import os
import re
import sys

MAX_FILE = 700
MAX_FUNC = 100
HEAD = re.compile(r'^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(')


def functions(lines):
    """(name, first line, length in lines) of each function body."""
    out = []
    i = 0
    n = len(lines)
    while i < n:
        if lines[i].rstrip() == '{':
            # the head: the nearest line above at column 0 with "name("
            j = i - 1
            while j >= 0 and not HEAD.match(lines[j]) and i - j < 12:
                j -= 1
            k = i + 1
            while k < n and lines[k].rstrip() != '}':
                k += 1
            if j >= 0 and HEAD.match(lines[j]) and not lines[j].rstrip().endswith(';'):
                out.append((HEAD.match(lines[j]).group(1), j + 1, k - i + 1))
            i = k + 1
        else:
            i += 1
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), '..'))
    bad = 0
    for top, _, names in os.walk(os.path.join(root, 'src')):
        for fn in sorted(names):
            if not fn.endswith('.c'):
                continue
            path = os.path.join(top, fn)
            rel = os.path.relpath(path, root)
            with open(path, errors='replace') as f:
                lines = f.read().split('\n')
            if len(lines) - 1 > MAX_FILE:
                print('%s: %d lines (at most %d: split it where it takes on a second job)'
                      % (rel, len(lines) - 1, MAX_FILE), file=sys.stderr)
                bad = 1
            for name, line, length in functions(lines):
                if length > MAX_FUNC:
                    print('%s:%d: %s() is %d lines (at most %d)' % (rel, line, name, length, MAX_FUNC),
                          file=sys.stderr)
                    bad = 1
    if not bad:
        print('checksize: ok')
    return bad


if __name__ == '__main__':
    sys.exit(main())
