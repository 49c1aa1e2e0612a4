#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make check-packaging: the Debian packages build, pass lintian and work on
# a machine that has only them.
#
#  1. copies the tree as a checkout has it (fresh_copy_tree: what git
#     tracks or would track, or without git every file but build
#     directories) to a scratch
#     directory and runs `dpkg-buildpackage -us -uc -b` there: muster,
#     libmuster0, libmuster-dev and python3-muster;
#  2. runs lintian on them and fails on any error;
#  3. makes a throwaway Debian 12 root (scripts/fresh-root.sh), installs
#     the four .debs there with apt (which brings their dependencies from
#     the mirror, through the cache fresh-check also uses) and runs
#     `muster version`, `muster tracker --help` and `python3 -c "import
#     muster"` (the binding loading libmuster.so.0 by its soname).
#
# The .debs are left in build/debs (PKG_OUT). Needs root, and the packages
# of `scripts/deps.sh packaging`. Environment: as scripts/fresh-root.sh,
# plus PKG_LOG (the whole run's output, default build/check-packaging.log).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
out=${PKG_OUT:-$top/build/debs}
fresh_name=check-packaging
. "$top/scripts/fresh-root.sh"
fresh_init "${PKG_LOG:-$top/build/check-packaging.log}"
for tool in dpkg-buildpackage dh lintian tar; do
	command -v "$tool" >/dev/null 2>&1 ||
		fresh_die "'$tool' is missing (scripts/deps.sh packaging installs it)"
done

work=$(mktemp -d "${FRESH_TMP:-/var/tmp}/muster-pkg.XXXXXX")
# shellcheck disable=SC2016 # expanded by fresh_cleanup
fresh_on_exit='rm -rf "$work"'
src=$work/muster
mkdir "$src"
fresh_copy_tree "$src"
[ -f "$src/debian/control" ] || fresh_die "no debian/ in the tree at $top"

fresh_step "dpkg-buildpackage -us -uc -b in a clean copy of the tree"
(cd "$src" && nice dpkg-buildpackage -us -uc -b -j"$(nproc 2>/dev/null || echo 2)") \
	>>"$fresh_log" 2>&1 || { tail -n 40 "$fresh_log" >&2; fresh_die "dpkg-buildpackage failed"; }
debs=""
for p in muster libmuster0 libmuster-dev python3-muster; do
	set -- "$work/${p}"_*.deb
	[ -f "$1" ] || fresh_die "dpkg-buildpackage made no $p package"
	debs="$debs $1"
done

fresh_step "lintian (fails on errors)"
lintian --fail-on error --info "$work"/*.changes >>"$fresh_log" 2>&1 || {
	grep -E '^[EW]:' "$fresh_log" >&2 || true
	fresh_die "lintian reported errors"
}
grep -E '^[EW]:' "$fresh_log" || true

rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2086 # paths without spaces, made above
cp $debs "$out"/

fresh_make_root
mkdir "$root/root/debs"
cp "$out"/*.deb "$root/root/debs/"
fresh_step "in the root: apt-get install the .debs, then muster version, tracker --help, import muster"
# shellcheck disable=SC2016 # expanded inside the root
fresh_run_in_root 'set -e
apt-get update -q
apt-get install -y -q --no-install-recommends /root/debs/*.deb
cd /
echo "check-packaging: $(muster version)"
muster tracker --help | head -n 1
python3 -c "import muster, muster._lib as l; print(\"check-packaging: import muster:\", l.lib._name)"
apt-get autoclean -q >/dev/null' ||
	fresh_die "the packages do not install or run in a fresh Debian 12 root (log: $fresh_log)"
grep -E '^check-packaging: (muster [0-9]|import muster)|^usage: muster tracker' "$fresh_log" || true
fresh_step "ok: 4 packages built, lintian clean of errors, installed and run in a fresh root ($out)"
