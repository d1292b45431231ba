#!/usr/bin/env bash
# Run a command with a local DynamoDB-compatible server available.
#
# Usage: scripts/with-dynalite.sh CMD [ARGS...]
#
# If SQSONCE_TEST_DYNAMODB_ENDPOINT is set and answers, CMD runs against
# that server. Otherwise a private server (dynalite, see scripts/dynalite/)
# is installed if needed, started on 127.0.0.1 with a free port, exported as
# SQSONCE_TEST_DYNAMODB_ENDPOINT for CMD, and stopped by its PID when this
# script exits, whatever the outcome. The exit status is CMD's.
#
# It composes with scripts/with-sqs.sh: scripts/with-sqs.sh
# scripts/with-dynalite.sh go test ./... has both servers up.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dynalite_dir="$script_dir/dynalite"
start_timeout_s=20

log() { printf 'with-dynalite: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ $# -eq 0 ]]; then
	printf 'usage: %s CMD [ARGS...]\n' "$0" >&2
	exit 2
fi

# healthy URL: succeeds if a GET of URL answers with a 2xx status within 2 s
# (dynalite answers GET / with "healthy: ...").
healthy() {
	local url="${1%/}/"
	if command -v curl >/dev/null 2>&1; then
		curl --silent --fail --max-time 2 --output /dev/null "$url"
	else
		node -e '
			fetch(process.argv[1], { signal: AbortSignal.timeout(2000) })
				.then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1));
		' "$url"
	fi
}

if [[ -n "${SQSONCE_TEST_DYNAMODB_ENDPOINT:-}" ]]; then
	if healthy "$SQSONCE_TEST_DYNAMODB_ENDPOINT"; then
		exec "$@"
	fi
	log "SQSONCE_TEST_DYNAMODB_ENDPOINT=$SQSONCE_TEST_DYNAMODB_ENDPOINT does not answer; starting a local server instead"
fi

command -v node >/dev/null 2>&1 || die "node is required to run the local DynamoDB server (scripts/dynalite)"

if [[ ! -d "$dynalite_dir/node_modules/dynalite" ]]; then
	command -v npm >/dev/null 2>&1 || die "npm is required to install the local DynamoDB server (scripts/dynalite)"
	log "installing the local DynamoDB server into $dynalite_dir/node_modules"
	npm ci --prefix "$dynalite_dir" --no-audit --no-fund >&2 || die "npm ci in $dynalite_dir failed"
fi

server_log="$(mktemp "${TMPDIR:-/tmp}/sqsonce-dynalite.XXXXXX")"
server_pid=""

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
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SQSONCE_DYNALITE_PARENT_PID=$$ DYNALITE_PORT=0 node "$dynalite_dir/server.mjs" >"$server_log" 2>&1 </dev/null &
server_pid=$!

endpoint=""
deadline=$((SECONDS + start_timeout_s))
while :; do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		log "error: the local DynamoDB server exited during start-up; its output:"
		cat "$server_log" >&2 || true
		exit 1
	fi
	if [[ -z "$endpoint" ]]; then
		line="$(grep -m1 -E '^listening http://127\.0\.0\.1:[0-9]+$' "$server_log" || true)"
		if [[ -n "$line" ]]; then
			endpoint="${line#listening }"
		fi
	fi
	if [[ -n "$endpoint" ]] && healthy "$endpoint"; then
		break
	fi
	if ((SECONDS >= deadline)); then
		log "error: the local DynamoDB server did not become ready within ${start_timeout_s}s; its output:"
		cat "$server_log" >&2 || true
		exit 1
	fi
	sleep 0.1
done

export SQSONCE_TEST_DYNAMODB_ENDPOINT="$endpoint"

# Run CMD as a child and wait for it, so that a SIGINT or SIGTERM sent to this
# script is passed on to CMD and the server is still stopped afterwards. The
# subshell restores default SIGINT/SIGQUIT handling (bash ignores them in
# asynchronous commands) and keeps this script's stdin.
(
	trap - INT QUIT
	exec "$@"
) <&0 &
cmd_pid=$!
trap 'kill -INT "$cmd_pid" 2>/dev/null || true' INT
trap 'kill -TERM "$cmd_pid" 2>/dev/null || true' TERM

# wait also returns (with status > 128) when a trapped signal arrives, so only
# a finished CMD ends the loop; a last wait then collects CMD's own status.
status=0
while kill -0 "$cmd_pid" 2>/dev/null; do
	wait "$cmd_pid" && status=0 || status=$?
done
wait "$cmd_pid" 2>/dev/null && status=0 || {
	rc=$?
	((rc == 127)) || status=$rc
}
exit "$status"
