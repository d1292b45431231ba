#!/usr/bin/env bash
# Run a command with a local SQS-compatible server available.
#
# Usage: scripts/with-sqs.sh CMD [ARGS...]
#
# If SQSONCE_TEST_SQS_ENDPOINT is set and its /health answers, CMD runs
# against that server. Otherwise a private server (fauxqs, see
# scripts/sqs/) is installed if needed, started on 127.0.0.1 with a free
# port, exported as SQSONCE_TEST_SQS_ENDPOINT for CMD, and stopped when this
# script exits, whatever the outcome. The exit status is CMD's.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sqs_dir="$script_dir/sqs"
start_timeout_s=20

log() { printf 'with-sqs: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ $# -eq 0 ]]; then
	printf 'usage: %s CMD [ARGS...]\n' "$0" >&2
	exit 2
fi

# healthy URL: succeeds if URL/health answers with a 2xx status within 2 s.
healthy() {
	local url="${1%/}/health"
	if command -v curl >/dev/null 2>&1; then
		curl --silent --fail --max-time 2 --output /dev/null "$url"
	else
		node -e '
			fetch(process.argv[1], { signal: AbortSignal.timeout(2000) })
				.then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1));
		' "$url"
	fi
}

if [[ -n "${SQSONCE_TEST_SQS_ENDPOINT:-}" ]]; then
	if healthy "$SQSONCE_TEST_SQS_ENDPOINT"; then
		exec "$@"
	fi
	log "SQSONCE_TEST_SQS_ENDPOINT=$SQSONCE_TEST_SQS_ENDPOINT does not answer; starting a local server instead"
fi

command -v node >/dev/null 2>&1 || die "node is required to run the local SQS server (scripts/sqs)"

if [[ ! -d "$sqs_dir/node_modules/fauxqs" ]]; then
	command -v npm >/dev/null 2>&1 || die "npm is required to install the local SQS server (scripts/sqs)"
	log "installing the local SQS server into $sqs_dir/node_modules"
	npm ci --prefix "$sqs_dir" --no-audit --no-fund >&2 || die "npm ci in $sqs_dir failed"
fi

server_log="$(mktemp "${TMPDIR:-/tmp}/sqsonce-sqs.XXXXXX")"
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

SQSONCE_SQS_PARENT_PID=$$ FAUXQS_PORT=0 node "$sqs_dir/server.mjs" >"$server_log" 2>&1 </dev/null &
server_pid=$!

endpoint=""
deadline=$((SECONDS + start_timeout_s))
while :; do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		log "error: the local SQS server exited during start-up; its output:"
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
		log "error: the local SQS server did not become ready within ${start_timeout_s}s; its output:"
		cat "$server_log" >&2 || true
		exit 1
	fi
	sleep 0.1
done

export SQSONCE_TEST_SQS_ENDPOINT="$endpoint"

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
