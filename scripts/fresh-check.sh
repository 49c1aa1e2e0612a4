#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The README's first command on a fresh machine. Makes a throwaway Debian 12
# root (debootstrap --variant=minbase bookworm) and gives it only what the
# README says a user brings: a compiler, make, cmake, git and python3,
# installed without their Recommends so that scripts/deps.sh has to name
# everything else. It then copies this working tree in (the files git tracks
# or would track, so uncommitted edits count and build directories do not),
# runs `make demo` there as root and fails unless it exits 0 and its last
# line shows the demo's success.
#
#   scripts/fresh-check.sh [TARGET...]   make targets to run in the root, one
#                                        `make TARGET` each, in order; default:
#                                        demo (`demo check`: both README commands)
#
# Environment:
#   FRESH_CACHE   downloaded .debs kept between runs, outside the tree
#                 (default /var/cache/muster-fresh); the root itself is new
#                 every run
#   FRESH_TMP     where the root is made (default /var/tmp; ~1.5 GB)
#   FRESH_LOG     the whole run's output (default build/fresh-check.log)
#   FRESH_MIRROR  Debian mirror (default: this machine's, else deb.debian.org;
#                 security updates come from this machine's debian-security
#                 mirror, else deb.debian.org's)
#
# Needs root (or sudo), debootstrap and util-linux. The root, its private
# mount and PID namespace and their clean-up are scripts/fresh-root.sh's
# (shared with scripts/check-packaging.sh): everything mounted for the root
# stays in the namespace, and on exit, including Ctrl-C, TERM, HUP and
# SIGKILL, the namespace dies and the root is deleted (by the next run,
# after a SIGKILL).
set -eu

# What the demo prints last when it succeeds. Whoever changes the demo keeps
# a last line that matches this, or changes it here.
success_re='Done\.$'

top=$(cd "$(dirname "$0")/.." && pwd)
targets=${*:-demo}
log=${FRESH_LOG:-$top/build/fresh-check.log}

if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || {
		echo "fresh-check: needs root (debootstrap, chroot and mounts); run it as root or install sudo" >&2
		exit 1
	}
	exec sudo env FRESH_CACHE="${FRESH_CACHE:-}" FRESH_TMP="${FRESH_TMP:-}" FRESH_LOG="$log" \
		FRESH_MIRROR="${FRESH_MIRROR:-}" sh "$0" "$@"
fi
[ -n "${FRESH_CACHE:-}" ] || unset FRESH_CACHE
[ -n "${FRESH_TMP:-}" ] || unset FRESH_TMP
fresh_name=fresh-check
. "$top/scripts/fresh-root.sh"
fresh_init "$log"
for tool in git tar; do
	command -v "$tool" >/dev/null 2>&1 || fresh_die "'$tool' is missing"
done

now() { date +%s; }

t0=$(now)
fresh_make_root
t1=$(now)
# the npm configuration of this machine's network, as `make check` needs
[ ! -f "${HOME:-/root}/.npmrc" ] || cp "${HOME:-/root}/.npmrc" "$root/root/.npmrc"

mkdir "$root/root/muster"
fresh_copy_tree "$root/root/muster"
[ -f "$root/root/muster/Makefile" ] || fresh_die "could not copy the tree at $top into the root"

# Inside the root: a clean environment (no MAKEFLAGS or CC from our caller),
# the user's own packages, then the README's command. Each phase says how
# long it took, in seconds.
# shellcheck disable=SC2016 # expanded inside the root
inner='set -e
t=$(date +%s)
apt-get update -q
apt-get install -y -q --no-install-recommends gcc make cmake git python3
echo "fresh-check: phase user-packages $(( $(date +%s) - t ))"
cd /root/muster
for target in '"$targets"'; do
	t=$(date +%s)
	echo "fresh-check: running make $target"
	make "$target" >/root/make.out 2>&1 || { rc=$?; cat /root/make.out; exit $rc; }
	cat /root/make.out
	echo "fresh-check: phase make-$target $(( $(date +%s) - t ))"
	echo "fresh-check: last line of make $target: $(grep . /root/make.out | tail -n 1)"
done
apt-get autoclean -q >/dev/null'

fresh_step "in the root: apt-get install gcc make cmake git python3, then make $targets"
fresh_run_in_root "$inner" ||
	fresh_die "make $targets failed in a fresh Debian 12 root (exit $?; log: $log)"
t2=$(now)

phases=$(sed -n 's/^fresh-check: phase \([^ ]*\) \([0-9]*\)$/\1 \2 s/p' "$log" |
	paste -s -d, - | sed 's/,/, /g')
case " $targets " in
*" demo "*)
	last=$(sed -n 's/^fresh-check: last line of make demo: //p' "$log")
	echo "$last" | grep -q "$success_re" ||
		fresh_die "make demo exited 0 but its last line is not the demo's success ('$last'; log: $log)"
	fresh_step "ok: make demo succeeded in a fresh Debian 12 root: $last"
	;;
esac
fresh_step "ok: make $targets in a fresh Debian 12 root took $((t2 - t0)) s: debootstrap $((t1 - t0)) s, $phases"
