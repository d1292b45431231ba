# shellcheck shell=bash
# Installing a Debian package that a script needs (PostgreSQL's server,
# promtool, Chromium) when it is missing. Sourced, not run; the script that
# sources it defines log and die (see server.sh).

# need_root WHAT PKG: sets as_root to the prefix that runs a command as
# root for installing Debian's package PKG, which provides WHAT: nothing
# when this script runs as root, sudo when it does not and sudo is
# installed (sudo may ask for a password). Otherwise, or without apt-get, it
# exits (status 1), naming the command to run.
need_root() {
	local what="$1" pkg="$2"
	local cmd="apt-get install --no-install-recommends $pkg"
	command -v apt-get >/dev/null 2>&1 ||
		die "$what is missing and there is no apt-get here: install it (Debian's package $pkg)"
	if ((EUID == 0)); then
		as_root=()
	elif command -v sudo >/dev/null 2>&1; then
		as_root=(sudo)
	else
		die "$what is missing, and installing it needs root (there is no sudo): run \`$cmd\` as root, then run this again"
	fi
}

# apt_install PKG: installs Debian's package PKG without its
# recommendations, non-interactively, through the prefix need_root set,
# running `apt-get update` first when the plain install fails. It exits
# (status 1) when apt-get fails.
apt_install() {
	local pkg="$1"
	log "installing Debian's $pkg package${as_root[*]:+ with sudo}"
	if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >&2; then
		"${as_root[@]}" apt-get update -q >&2 || die "apt-get update failed"
		"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >&2 ||
			die "apt-get install $pkg failed"
	fi
}
