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
# Needs root (or sudo), debootstrap and util-linux. Everything mounted for
# the root (by debootstrap, then proc, sysfs, devpts and the .deb cache) is
# mounted in a private mount and PID namespace, so it never appears outside
# and ends with the namespace; killing the namespace's first process kills
# every process in it. On exit, including Ctrl-C, TERM and HUP, the namespace
# is killed and the root deleted. If this script is killed outright
# (SIGKILL), the namespace dies with it and the next run deletes the root.
set -eu

# What the demo prints last when it succeeds. Whoever changes the demo keeps
# a last line that matches this, or changes it here.
success_re='Done\.$'

top=$(cd "$(dirname "$0")/.." && pwd)
targets=${*:-demo}
cache=${FRESH_CACHE:-/var/cache/muster-fresh}
tmp=${FRESH_TMP:-/var/tmp}
log=${FRESH_LOG:-$top/build/fresh-check.log}

die() {
	echo "fresh-check: $*" >&2
	exit 1
}

if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 ||
		die "needs root (debootstrap, chroot and mounts); run it as root or install sudo"
	exec sudo env FRESH_CACHE="$cache" FRESH_TMP="$tmp" FRESH_LOG="$log" \
		FRESH_MIRROR="${FRESH_MIRROR:-}" sh "$0" "$@"
fi
for tool in debootstrap unshare setpriv chroot flock git tar; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "'$tool' is missing (scripts/deps.sh test installs debootstrap)"
done

# The mirrors this machine's apt uses (deb822 sources, then one-line ones).
host_mirror() {
	{
		sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources
		sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}//p' /etc/apt/sources.list
	} 2>/dev/null | tr -s ' \t' '\n' | grep -E "^https?://.*/$1/?\$" | head -n 1
}
mirror=${FRESH_MIRROR:-$(host_mirror debian)}
mirror=${mirror:-http://deb.debian.org/debian}
security=$(host_mirror debian-security)
security=${security:-http://deb.debian.org/debian-security}

mkdir -p "$cache/debootstrap" "$cache/apt" "$(dirname "$log")"
# One run at a time: the runs share the .deb caches and apt locks them.
exec 9>"$cache/lock"
if ! flock -n 9; then
	echo "fresh-check: waiting for another run to finish (it holds $cache/lock)" >&2
	flock 9
fi
: >"$log"

# The mount points at or under $1, as this namespace sees them.
mounted_under() {
	awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts
}

# A root whose run was killed outright has no live owner; delete it, unless
# something is still mounted under it (it never should be: see above).
for old in "$tmp"/muster-fresh-root.*; do
	[ -d "$old" ] || continue
	kill -0 "${old##*.}" 2>/dev/null && continue
	if [ -n "$(mounted_under "$old")" ]; then
		echo "fresh-check: not deleting $old: something is mounted under it" >&2
		continue
	fi
	rm -rf "$old"
done

root=$tmp/muster-fresh-root.$$
ns_pid=""

# Kill the namespace (unshare's --kill-child takes its first process and so
# every process in it; unshare itself ignores TERM), wait until no process
# is left inside the root, then delete it. Deleting is safe even while the
# namespace winds down: the root's mounts exist only inside it.
cleanup() {
	rc=$?
	# A second signal must not cut the clean-up short.
	trap - EXIT
	trap '' INT TERM HUP
	if [ -n "$ns_pid" ]; then
		kill -KILL "$ns_pid" 2>/dev/null || true
		wait "$ns_pid" 2>/dev/null || true
	fi
	n=0
	while [ $n -lt 100 ] && [ -n "$(inside_root)" ]; do
		sleep 0.1
		n=$((n + 1))
	done
	if [ -d "$root" ]; then
		if [ -n "$(mounted_under "$root")" ]; then
			echo "fresh-check: not deleting $root: something is mounted under it" >&2
			rc=1
		else
			rm -rf "$root"
		fi
	fi
	exit $rc
}

# The processes whose root directory is inside $root.
inside_root() {
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		case $r in "$root" | "$root"/*) echo "${p#/proc/}" ;; esac
	done
}

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

now() { date +%s; }
step() { echo "fresh-check: $*" | tee -a "$log"; }

# Run "$@" as the first process of a new PID and private mount namespace,
# with its output in the log and the log's last 40 lines on failure. In the
# background, so that a signal reaches our traps at once. Everything it
# mounts (debootstrap mounts proc and sys in the root too) stays in the
# namespace. It dies with the namespace, and the namespace dies when we do,
# even by SIGKILL: exec makes this shell the parent, whose death sends the
# parent-death signal.
in_ns() {
	(exec setpriv --pdeathsig KILL unshare --mount --propagation private \
		--pid --fork --kill-child=KILL "$@" >>"$log" 2>&1) &
	ns_pid=$!
	wait "$ns_pid" || {
		rc=$?
		ns_pid=""
		tail -n 40 "$log" >&2
		return $rc
	}
	ns_pid=""
}

t0=$(now)
step "making a Debian 12 root in $root from $mirror (log: $log)"
mkdir "$root"
in_ns debootstrap --variant=minbase --cache-dir="$cache/debootstrap" \
	bookworm "$root" "$mirror" || die "debootstrap failed"
t1=$(now)

# The sources a Debian 12 install has: the release, its updates and security.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# This machine's network as it is: the CA certificates it added (HTTPS
# through an inspecting proxy, as npm in `make check` needs; the
# ca-certificates package keeps them when it is installed later) and the
# npm configuration.
if [ -d /usr/local/share/ca-certificates ]; then
	mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
	cp -R /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
	[ ! -f /etc/ssl/certs/ca-certificates.crt ] ||
		cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
[ ! -f "${HOME:-/root}/.npmrc" ] || cp "${HOME:-/root}/.npmrc" "$root/root/.npmrc"

# The tree as a user's checkout has it: what git tracks or would track; or,
# outside a git checkout (a tarball, or this check run by `make check` in
# such a root), every file but what .gitignore names.
tree_files() {
	if git -c safe.directory="$top" -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
		git -c safe.directory="$top" -C "$top" ls-files --cached --others --exclude-standard
	else
		(cd "$top" && find . \( -path ./build -o -path './build-*' -o -path ./.cache \
			-o -name __pycache__ -o -name '*.pyc' \) -prune -o -type f -print)
	fi
}
mkdir "$root/root/muster"
tree_files | (cd "$top" && while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done) |
	tar -C "$top" -cf - --verbatim-files-from -T - | tar -C "$root/root/muster" -xf -
[ -f "$root/root/muster/Makefile" ] || die "could not copy the tree at $top into the root"

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

# In the namespace: mount what a running system has, then enter the root.
# The root is bound onto itself first so that, inside, / is a mount point
# as on a machine: tools that change its propagation (unshare, and so this
# script when `make check` runs it in the root) need that.
# shellcheck disable=SC2016 # expanded by the namespace's shell
setup='set -e
mount --bind "$1" "$1"
mount -t proc proc "$1/proc"
mount -t sysfs -o ro sysfs "$1/sys"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$1/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$1/dev/shm"
mount --bind "$2" "$1/var/cache/apt/archives"
exec chroot "$1" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
	DEBIAN_FRONTEND=noninteractive \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/sh -c "$3"'

step "in the root: apt-get install gcc make cmake git python3, then make $targets"
in_ns sh -c "$setup" sh "$root" "$cache/apt" "$inner" ||
	die "make $targets failed in a fresh Debian 12 root (exit $?; log: $log)"
t2=$(now)

phases=$(sed -n 's/^fresh-check: phase \([^ ]*\) \([0-9]*\)$/\1 \2 s/p' "$log" |
	paste -s -d, - | sed 's/,/, /g')
case " $targets " in
*" demo "*)
	last=$(sed -n 's/^fresh-check: last line of make demo: //p' "$log")
	echo "$last" | grep -q "$success_re" ||
		die "make demo exited 0 but its last line is not the demo's success ('$last'; log: $log)"
	step "ok: make demo succeeded in a fresh Debian 12 root: $last"
	;;
esac
step "ok: make $targets in a fresh Debian 12 root took $((t2 - t0)) s: debootstrap $((t1 - t0)) s, $phases"
