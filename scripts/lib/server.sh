# shellcheck shell=bash
# What scripts/with-sqs.sh, scripts/with-dynalite.sh and
# scripts/with-postgres.sh have in common. Each makes one local server
# available to a command: the one its variable names if that answers,
# otherwise one of its own, stopped when the script exits whatever the
# outcome. Sourced by them, not run.
#
# Messages go to stderr, prefixed with the script's name ("with-sqs: ...").

server_prog="${0##*/}"
server_prog="${server_prog%.sh}"

log() { printf '%s: %s\n' "$server_prog" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# check_args CMD [ARGS...]: exits with a usage message (status 2) when the
# script was given no command.
check_args() {
	if [[ $# -eq 0 ]]; then
		printf 'usage: %s CMD [ARGS...]\n' "$0" >&2
		exit 2
	fi
}

# http_ok URL: succeeds if a GET of URL answers with a 2xx status within 2 s.
http_ok() {
	if command -v curl >/dev/null 2>&1; then
		curl --silent --fail --max-time 2 --output /dev/null "$1"
	else
		node -e '
			fetch(process.argv[1], { signal: AbortSignal.timeout(2000) })
				.then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1));
		' "$1"
	fi
}

# stop_on_exit FUNC: runs FUNC when the script exits, also when SIGINT
# (status 130) or SIGTERM (status 143) ends it.
stop_on_exit() {
	# shellcheck disable=SC2064 # FUNC is expanded now, on purpose.
	trap "$1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# install_node_server WHAT DIR MODULE: checks that node is there and, unless
# DIR/node_modules/MODULE is, installs the npm package in DIR (a server
# under scripts/, WHAT in messages).
install_node_server() {
	local what="$1" dir="$2" module="$3"
	local name="scripts/${dir##*/}"
	command -v node >/dev/null 2>&1 || die "node is required to run $what ($name)"
	if [[ ! -d "$dir/node_modules/$module" ]]; then
		command -v npm >/dev/null 2>&1 || die "npm is required to install $what ($name)"
		log "installing $what into $dir/node_modules"
		npm ci --prefix "$dir" --no-audit --no-fund >&2 || die "npm ci in $dir failed"
	fi
}

# start_node_server WHAT DIR PARENT_VAR PORT_VAR HEALTHY: starts DIR/server.mjs
# with node; see start_server.
start_node_server() {
	start_server "$1" "${2##*/}" "$3" "$4" "$5" node "$2/server.mjs"
}

# start_server WHAT TAG PARENT_VAR PORT_VAR HEALTHY PROG [ARGS...]: starts
# the server PROG ARGS (one that follows scripts/lib/server.mjs) on
# 127.0.0.1 with a free port (PORT_VAR=0), waits at most 30 s until it
# prints "listening URL" and `HEALTHY URL` succeeds, and sets endpoint to
# URL. TAG names its log file. PARENT_VAR holds this script's PID: the
# server ends by itself once this script is gone, and outlives a Ctrl-C so
# that the command's clean-up can still reach it. The server is stopped by
# its PID when the script exits (SIGTERM, then SIGKILL after 5 s).
start_server() {
	local what="$1" tag="$2" parent_var="$3" port_var="$4" healthy="$5"
	shift 5
	server_log="$(mktemp "${TMPDIR:-/tmp}/sqsonce-$tag.XXXXXX")"
	server_pid=""
	stop_on_exit stop_server

	env "$parent_var=$$" "$port_var=0" "$@" >"$server_log" 2>&1 </dev/null &
	server_pid=$!

	endpoint=""
	local line timeout_s=30
	local deadline=$((SECONDS + timeout_s))
	while :; do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			log "error: $what exited during start-up; its output:"
			cat "$server_log" >&2 || true
			exit 1
		fi
		if [[ -z "$endpoint" ]]; then
			line="$(grep -m1 -E '^listening http://127\.0\.0\.1:[0-9]+$' "$server_log" || true)"
			if [[ -n "$line" ]]; then
				endpoint="${line#listening }"
			fi
		fi
		if [[ -n "$endpoint" ]] && "$healthy" "$endpoint"; then
			break
		fi
		if ((SECONDS >= deadline)); then
			log "error: $what did not become ready within ${timeout_s}s; its output:"
			cat "$server_log" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
}

# stop_server: stops the server start_server started, if it runs,
# and removes its log.
stop_server() {
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		local i
		for ((i = 0; i < 50; i++)); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$server_pid" 2>/dev/null; then
			log "server (pid $server_pid) ignored SIGTERM; killing it"
			kill -KILL "$server_pid" 2>/dev/null || true
		fi
		wait "$server_pid" 2>/dev/null || true
	fi
	rm -f "$server_log"
}

# run_command CMD [ARGS...]: runs CMD and exits with its status.
#
# CMD runs as a child that this script waits for, so that a SIGINT or
# SIGTERM sent to this script is passed on to CMD and the server is still
# stopped afterwards. The subshell restores default SIGINT/SIGQUIT handling
# (bash ignores them in asynchronous commands) and keeps this script's
# stdin.
run_command() {
	(
		trap - INT QUIT
		exec "$@"
	) <&0 &
	cmd_pid=$!
	trap 'kill -INT "$cmd_pid" 2>/dev/null || true' INT
	trap 'kill -TERM "$cmd_pid" 2>/dev/null || true' TERM

	# wait also returns (with status > 128) when a trapped signal arrives, so
	# only a finished CMD ends the loop; a last wait then collects CMD's own
	# status.
	local status=0 rc
	while kill -0 "$cmd_pid" 2>/dev/null; do
		wait "$cmd_pid" && status=0 || status=$?
	done
	# shellcheck disable=SC2015 # status=0 cannot fail.
	wait "$cmd_pid" 2>/dev/null && status=0 || {
		rc=$?
		((rc == 127)) || status=$rc
	}
	exit "$status"
}
