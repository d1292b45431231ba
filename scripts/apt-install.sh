#!/usr/bin/env bash
# Install Debian's package PKG when the command CMD is missing.
#
# Usage: scripts/apt-install.sh CMD PKG
#
# Nothing happens when CMD is on the PATH. Otherwise PKG is installed with
# apt-get, without its recommendations: directly as root, with sudo when
# not root and sudo is installed; else it fails, naming the command to run
# as root. The exit status is 0 once CMD is on the PATH.
set -euo pipefail

prog="${0##*/}"
prog="${prog%.sh}"
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ $# -ne 2 ]]; then
	printf 'usage: %s CMD PKG\n' "$0" >&2
	exit 2
fi
cmd="$1" pkg="$2"

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/apt.sh
source "$script_dir/lib/apt.sh"

command -v "$cmd" >/dev/null 2>&1 && exit 0
need_root "$cmd" "$pkg"
apt_install "$pkg"
command -v "$cmd" >/dev/null 2>&1 || die "$pkg installed, but $cmd is not on the PATH"
