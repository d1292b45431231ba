#!/usr/bin/env bash
# Run a command with Prometheus's promtool on the PATH.
#
# Usage: scripts/with-promtool.sh CMD [ARGS...]
#
# The tests check the alert rules in deploy/prometheus/ with promtool
# (`promtool check rules`, `promtool test rules`). When promtool is not on
# the PATH and this runs as root, Debian's `prometheus` package, which
# ships it, is installed with apt-get, without its recommendations; the
# Prometheus server the package also installs is never started: while the
# package installs, invoke-rc.d is told (through /usr/sbin/policy-rc.d,
# put there only when there is none, and removed afterwards) to start no
# service. Otherwise it fails, naming the package to install. Then CMD
# runs, and the exit status is CMD's.
set -euo pipefail

prog="${0##*/}"
prog="${prog%.sh}"
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ $# -eq 0 ]]; then
	printf 'usage: %s CMD [ARGS...]\n' "$0" >&2
	exit 2
fi

if ! command -v promtool >/dev/null 2>&1; then
	((EUID == 0)) || die "promtool is missing: install Debian's prometheus package (apt-get install --no-install-recommends prometheus)"
	command -v apt-get >/dev/null 2>&1 || die "promtool is missing and there is no apt-get to install Debian's prometheus package with"
	log "installing Debian's prometheus package for promtool"
	policy=/usr/sbin/policy-rc.d
	put_policy=""
	if [[ ! -e "$policy" ]]; then
		put_policy=1
		trap 'rm -f "$policy"' EXIT
		printf '#!/bin/sh\n# Put by scripts/with-promtool.sh while it installs prometheus: start no service.\nexit 101\n' >"$policy"
		chmod 755 "$policy"
	fi
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends prometheus >&2; then
		apt-get update -q >&2 || die "apt-get update failed"
		apt-get install -y -q --no-install-recommends prometheus >&2 || die "apt-get install prometheus failed"
	fi
	if [[ -n "$put_policy" ]]; then
		rm -f "$policy"
		trap - EXIT
	fi
	command -v promtool >/dev/null 2>&1 || die "prometheus installed, but promtool is not on the PATH"
fi

exec "$@"
