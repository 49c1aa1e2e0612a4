# SPDX-License-Identifier: MIT
# shellcheck shell=sh
#
# A throwaway Debian 12 root, for checks that must run on a machine with
# nothing but what they install: sourced by scripts/check-packaging.sh (and
# meant for scripts/fresh-check.sh, whose approach this is: the same cache,
# lock, namespace and clean-up). The caller sets `top` (the source tree)
# and calls, in order:
#
#   fresh_init LOG           root check, tools, mirrors, cache lock, traps
#   fresh_make_root          debootstrap --variant=minbase bookworm into $root
#   fresh_run_in_root CMD    CMD by /bin/sh inside the root, as root, with a
#                            clean environment; its output goes to LOG
#
# and, to copy the tree somewhere, fresh_copy_tree DIR.
#
# Environment: FRESH_CACHE (downloaded .debs kept between runs, default
# /var/cache/muster-fresh), FRESH_TMP (where the root is made, default
# /var/tmp), FRESH_MIRROR (default: this machine's Debian mirror, else
# deb.debian.org). Everything mounted for the root lives in a private mount
# and PID namespace that dies with this script (even by SIGKILL); on exit
# the namespace is killed and the root deleted.

# The tree as a user's checkout has it, copied into DIR: what git tracks or
# would track; or, outside a git checkout (a tarball, or a check run by
# `make check` inside such a root), every file but build directories and
# Python caches.
fresh_copy_tree() {
	if git -c safe.directory="$top" -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
		git -c safe.directory="$top" -C "$top" ls-files --cached --others --exclude-standard
	else
		(cd "$top" && find . \( -path ./build -o -path './build-*' -o -path ./.cache \
			-o -name __pycache__ -o -name '*.pyc' \) -prune -o -type f -print)
	fi | (cd "$top" && while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done) |
		tar -C "$top" -cf - --verbatim-files-from -T - | tar -C "$1" -xf -
}

fresh_die() {
	echo "${fresh_name:-fresh}: $*" >&2
	exit 1
}

fresh_step() { echo "${fresh_name:-fresh}: $*" | tee -a "$fresh_log"; }

# The mirrors this machine's apt uses (deb822 sources, then one-line ones).
fresh_host_mirror() {
	{
		sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources
		sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}//p' /etc/apt/sources.list
	} 2>/dev/null | tr -s ' \t' '\n' | grep -E "^https?://.*/$1/?\$" | head -n 1
}

# The mount points at or under $1, as this namespace sees them.
fresh_mounted_under() {
	awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts
}

# The processes whose root directory is inside $root.
fresh_inside_root() {
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		case $r in "$root" | "$root"/*) echo "${p#/proc/}" ;; esac
	done
}

# Kill the namespace, wait until no process is left in the root, delete it.
fresh_cleanup() {
	rc=$?
	trap - EXIT
	trap '' INT TERM HUP # a second signal must not cut the clean-up short
	if [ -n "$fresh_ns_pid" ]; then
		kill -KILL "$fresh_ns_pid" 2>/dev/null || true
		wait "$fresh_ns_pid" 2>/dev/null || true
	fi
	n=0
	while [ $n -lt 100 ] && [ -n "$(fresh_inside_root)" ]; do
		sleep 0.1
		n=$((n + 1))
	done
	if [ -d "$root" ]; then
		if [ -n "$(fresh_mounted_under "$root")" ]; then
			echo "fresh: not deleting $root: something is mounted under it" >&2
			rc=1
		else
			rm -rf "$root"
		fi
	fi
	[ -z "${fresh_on_exit:-}" ] || eval "$fresh_on_exit"
	exit $rc
}

# Run "$@" as the first process of a new PID and private mount namespace,
# output to the log (its last 40 lines on failure), in the background so a
# signal reaches our traps at once; it dies with us (parent-death signal).
fresh_in_ns() {
	(exec setpriv --pdeathsig KILL unshare --mount --propagation private \
		--pid --fork --kill-child=KILL "$@" >>"$fresh_log" 2>&1) &
	fresh_ns_pid=$!
	wait "$fresh_ns_pid" || {
		rc=$?
		fresh_ns_pid=""
		tail -n 40 "$fresh_log" >&2
		return $rc
	}
	fresh_ns_pid=""
}

fresh_init() {
	fresh_log=$1
	fresh_cache=${FRESH_CACHE:-/var/cache/muster-fresh}
	fresh_tmp=${FRESH_TMP:-/var/tmp}
	fresh_ns_pid=""
	[ "$(id -u)" -eq 0 ] || fresh_die "needs root (debootstrap, chroot and mounts)"
	for tool in debootstrap unshare setpriv chroot flock; do
		command -v "$tool" >/dev/null 2>&1 ||
			fresh_die "'$tool' is missing (scripts/deps.sh packaging installs it)"
	done
	fresh_mirror=${FRESH_MIRROR:-$(fresh_host_mirror debian)}
	fresh_mirror=${fresh_mirror:-http://deb.debian.org/debian}
	fresh_security=$(fresh_host_mirror debian-security)
	fresh_security=${fresh_security:-http://deb.debian.org/debian-security}
	mkdir -p "$fresh_cache/debootstrap" "$fresh_cache/apt" "$(dirname "$fresh_log")"
	# One run at a time: the runs share the .deb caches and apt locks them.
	exec 9>"$fresh_cache/lock"
	if ! flock -n 9; then
		echo "${fresh_name:-fresh}: waiting for another run to finish (it holds $fresh_cache/lock)" >&2
		flock 9
	fi
	: >"$fresh_log"
	# roots whose run was killed outright (no live owner) go
	for old in "$fresh_tmp"/muster-fresh-root.*; do
		[ -d "$old" ] || continue
		kill -0 "${old##*.}" 2>/dev/null && continue
		[ -z "$(fresh_mounted_under "$old")" ] || continue
		rm -rf "$old"
	done
	root=$fresh_tmp/muster-fresh-root.$$
	trap fresh_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}

fresh_make_root() {
	fresh_step "making a Debian 12 root in $root from $fresh_mirror (log: $fresh_log)"
	mkdir "$root"
	fresh_in_ns debootstrap --variant=minbase --cache-dir="$fresh_cache/debootstrap" \
		bookworm "$root" "$fresh_mirror" || fresh_die "debootstrap failed"
	rm -f "$root/etc/apt/sources.list"
	cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $fresh_mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $fresh_security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	# This machine's CA certificates (HTTPS through an inspecting proxy).
	if [ -d /usr/local/share/ca-certificates ]; then
		mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
		cp -R /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
		[ ! -f /etc/ssl/certs/ca-certificates.crt ] ||
			cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
	fi
}

# In the namespace: mount what a running system has (the root bound onto
# itself, so / is a mount point as on a machine), the .deb cache as apt's,
# then run $1 in the root with a clean environment.
fresh_run_in_root() {
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
	fresh_in_ns sh -c "$setup" sh "$root" "$fresh_cache/apt" "$1"
}
