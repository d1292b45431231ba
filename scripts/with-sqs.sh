#!/usr/bin/env bash
# Run a command with a local SQS-compatible server available.
#
# Usage: scripts/with-sqs.sh CMD [ARGS...]
#
# If SQSONCE_TEST_SQS_ENDPOINT is set and its /health answers, CMD runs
# against that server (fauxqs, unless SQSONCE_TEST_SQS_SERVER says
# otherwise). Otherwise a private server (fauxqs, see scripts/sqs/) is
# installed if needed, started on 127.0.0.1 with a free port, exported as
# SQSONCE_TEST_SQS_ENDPOINT (and SQSONCE_TEST_SQS_SERVER=fauxqs) for CMD,
# and stopped when this script exits, whatever the outcome. The exit status
# is CMD's.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sqs_dir="$script_dir/sqs"
# shellcheck source-path=SCRIPTDIR source=lib/server.sh
source "$script_dir/lib/server.sh"

check_args "$@"

# healthy URL: succeeds if URL/health answers with a 2xx status within 2 s.
healthy() { http_ok "${1%/}/health"; }

if [[ -n "${SQSONCE_TEST_SQS_ENDPOINT:-}" ]]; then
	if healthy "$SQSONCE_TEST_SQS_ENDPOINT"; then
		exec "$@"
	fi
	log "SQSONCE_TEST_SQS_ENDPOINT=$SQSONCE_TEST_SQS_ENDPOINT does not answer; starting a local server instead"
fi

install_node_server "the local SQS server" "$sqs_dir" fauxqs
start_node_server "the local SQS server" "$sqs_dir" SQSONCE_SQS_PARENT_PID FAUXQS_PORT healthy
export SQSONCE_TEST_SQS_ENDPOINT="$endpoint"
export SQSONCE_TEST_SQS_SERVER=fauxqs

run_command "$@"
