#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Source style check (curl's checksrc idea): functions that overflow or are
# not re-entrant are banned, every C file starts with an SPDX line, no
# include runs up the layers (scripts/checklayers.py) and no file or
# function outgrows its job (scripts/checksize.py).
# Prints each offending line and fails when there is one.
set -u
cd "$(dirname "$0")/.."

files=$(git ls-files 'src/*.[ch]' 'include/*.h' 'tests/*.[ch]' 'fuzz/*.c' 'bench/*.c' 2>/dev/null)
[ -n "$files" ] || files=$(find src include tests fuzz bench -name '*.[ch]' 2>/dev/null)
bad=0

# \b keeps snprintf/vsnprintf and strtol out of the match.
if grep -nE '\b(sprintf|vsprintf|strcpy|strcat|atoi|atol|atof|strtok|gets)\s*\(' $files; then
	echo "checksrc: banned function above (use snprintf, memcpy with a length, strtol, strtok_r)" >&2
	bad=1
fi
for f in $files; do
	head -n 1 "$f" | grep -q 'SPDX-License-Identifier' || {
		echo "$f:1: missing SPDX-License-Identifier line" >&2
		bad=1
	}
done
# The layers (docs/internals/architecture.md): no include runs up them,
# and the command uses the library through its public headers.
python3 scripts/checklayers.py || bad=1
# Sizes: no .c file over 700 lines, no function over 100 (tables aside).
python3 scripts/checksize.py || bad=1
[ $bad -eq 0 ] && echo "checksrc: ok ($(echo $files | wc -w) files)"
exit $bad
