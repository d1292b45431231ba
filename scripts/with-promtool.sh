#!/usr/bin/env bash
# Run a command with Prometheus's promtool on the PATH.
#
# Usage: scripts/with-promtool.sh CMD [ARGS...]
#
# The tests check the alert rules in deploy/prometheus/ with promtool
# (`promtool check rules`, `promtool test rules`). When promtool is not on
# the PATH, Debian's `prometheus` package, which ships it, is installed
# with apt-get, without its recommendations: as root, or with sudo when
# not root (without sudo it fails, naming the command to run as root). The
# Prometheus server the package also installs is never started: while the
# package installs, invoke-rc.d is told (through /usr/sbin/policy-rc.d,
# put there only when there is none, and removed afterwards) to start no
# service. Then CMD runs, and the exit status is CMD's.
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

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/apt.sh
source "$script_dir/lib/apt.sh"

if ! command -v promtool >/dev/null 2>&1; then
	need_root promtool prometheus
	policy=/usr/sbin/policy-rc.d
	put_policy=""
	if [[ ! -e "$policy" ]]; then
		put_policy=1
		trap '"${as_root[@]}" rm -f "$policy"' EXIT
		printf '#!/bin/sh\n# Put by scripts/with-promtool.sh while it installs prometheus: start no service.\nexit 101\n' |
			"${as_root[@]}" tee "$policy" >/dev/null
		"${as_root[@]}" chmod 755 "$policy"
	fi
	apt_install prometheus
	if [[ -n "$put_policy" ]]; then
		"${as_root[@]}" rm -f "$policy"
		trap - EXIT
	fi
	command -v promtool >/dev/null 2>&1 || die "prometheus installed, but promtool is not on the PATH"
fi

exec "$@"
