#!/usr/bin/env bash
# Run a command with a local PostgreSQL server available.
#
# Usage: scripts/with-postgres.sh CMD [ARGS...]
#
# If SQSONCE_TEST_POSTGRES_URL is set and the server it names answers, CMD
# runs against that server. Otherwise a throwaway cluster is created in a
# temporary directory (initdb --no-sync, fsync off: for tests only), started
# on 127.0.0.1 with a free port and its socket in that directory, exported as
# SQSONCE_TEST_POSTGRES_URL for CMD, and stopped (immediate) and removed when
# this script exits, whatever the outcome. The exit status is CMD's.
#
# SQSONCE_TEST_POSTGRES_DURABLE=1 starts that cluster with PostgreSQL's
# durable defaults instead (fsync, synchronous_commit and full_page_writes
# on: every commit waits for its WAL flush), as a production server runs:
# make bench uses it, so that the shared ledger is measured with the
# durability the embedded one pays for.
#
# The server binaries are Debian's, under /usr/lib/postgresql/*/bin (the
# newest version found); when there are none, the `postgresql` package is
# installed with apt-get (as root, or with sudo when not root; without sudo
# it fails, naming the command to run as root), without the cluster that
# its installation would otherwise create and start. PostgreSQL refuses to
# run as root: as root, the cluster belongs to the unprivileged user
# `nobody` (SQSONCE_TEST_POSTGRES_USER names another).
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/server.sh
source "$script_dir/lib/server.sh"
# shellcheck source-path=SCRIPTDIR source=lib/apt.sh
source "$script_dir/lib/apt.sh"

start_timeout_s=30
run_as="${SQSONCE_TEST_POSTGRES_USER:-nobody}"

check_args "$@"

durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
case "${SQSONCE_TEST_POSTGRES_DURABLE:-}" in
"" | 0) ;;
1) durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on" ;;
*) die "SQSONCE_TEST_POSTGRES_DURABLE must be 1 or 0, not ${SQSONCE_TEST_POSTGRES_DURABLE}" ;;
esac

# newest_bindir prints the bin directory of the newest PostgreSQL server
# installed by Debian's packages, or nothing.
newest_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [[ -x "$d/postgres" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			printf '%s\n' "$d"
			return
		fi
	done
}

bindir="$(newest_bindir)"

# answers URL: succeeds if the server at URL accepts a query within 3 s.
answers() {
	local psql=""
	if [[ -n "$bindir" && -x "$bindir/psql" ]]; then
		psql="$bindir/psql"
	elif command -v psql >/dev/null 2>&1; then
		psql="psql"
	fi
	if [[ -n "$psql" ]]; then
		PGCONNECT_TIMEOUT=3 "$psql" -X -A -t -q -c 'select 1' "$1" >/dev/null 2>&1
	elif [[ -n "$bindir" && -x "$bindir/pg_isready" ]]; then
		"$bindir/pg_isready" -q -t 3 -d "$1"
	else
		return 1
	fi
}

if [[ -n "${SQSONCE_TEST_POSTGRES_URL:-}" ]]; then
	if answers "$SQSONCE_TEST_POSTGRES_URL"; then
		exec "$@"
	fi
	log "SQSONCE_TEST_POSTGRES_URL does not answer; starting a local server instead"
fi

if [[ -z "$bindir" ]]; then
	need_root "PostgreSQL's server (/usr/lib/postgresql/*/bin)" postgresql
	# Only the binaries: no cluster of the package's own on port 5432.
	"${as_root[@]}" mkdir -p /etc/postgresql-common/createcluster.d
	printf 'create_main_cluster = false\n' |
		"${as_root[@]}" tee /etc/postgresql-common/createcluster.d/sqsonce-tests.conf >/dev/null
	apt_install postgresql
	bindir="$(newest_bindir)"
	[[ -n "$bindir" ]] || die "postgresql installed, but no server under /usr/lib/postgresql/*/bin"
fi

# as_owner CMD...: run CMD as the cluster's owner (unprivileged).
if ((EUID == 0)); then
	id "$run_as" >/dev/null 2>&1 || die "user $run_as does not exist (set SQSONCE_TEST_POSTGRES_USER)"
	owner_group="$(id -gn "$run_as")"
	as_owner() { setpriv --reuid="$run_as" --regid="$owner_group" --clear-groups -- "$@"; }
else
	as_owner() { "$@"; }
fi

dir="$(mktemp -d "${TMPDIR:-/tmp}/sqsonce-pg.XXXXXX")"
started=""

# shellcheck disable=SC2317 # stop_on_exit calls it.
stop_server() {
	if [[ -n "$started" ]]; then
		as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 10 stop >/dev/null 2>&1 || {
			# pg_ctl failed: end the postmaster by the PID it recorded.
			local pid
			pid="$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)"
			[[ "$pid" =~ ^[0-9]+$ ]] && kill -KILL "$pid" 2>/dev/null || true
		}
	fi
	rm -rf "$dir"
}
stop_on_exit stop_server

if ((EUID == 0)); then
	chown "$run_as:$owner_group" "$dir"
fi
chmod 700 "$dir"

if ! as_owner "$bindir/initdb" --no-sync -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1; then
	cat "$dir/initdb.log" >&2 || true
	die "initdb failed"
fi

# free_port prints a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	local port i
	for ((i = 0; i < 50; i++)); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			printf '%s\n' "$port"
			return
		fi
	done
	die "found no free port"
}

# Another process may take the port between the check and the start: try a
# few ports.
for attempt in 1 2 3 4 5; do
	port="$(free_port)"
	if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$start_timeout_s" \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $dir $durability -c max_connections=200" \
		start >/dev/null 2>&1; then
		started=1
		break
	fi
	if ! grep -q 'could not bind' "$dir/server.log" 2>/dev/null || ((attempt == 5)); then
		log "error: the local PostgreSQL server did not start; its log:"
		cat "$dir/server.log" >&2 || true
		exit 1
	fi
	: >"$dir/server.log"
done

export SQSONCE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
answers "$SQSONCE_TEST_POSTGRES_URL" || die "the local PostgreSQL server started but does not answer at $SQSONCE_TEST_POSTGRES_URL"

run_command "$@"
