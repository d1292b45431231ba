#!/usr/bin/env bash
# Run a command with a local DynamoDB-compatible server available.
#
# Usage: scripts/with-dynalite.sh CMD [ARGS...]
#
# If SQSONCE_TEST_DYNAMODB_ENDPOINT is set and answers, CMD runs against
# that server (dynalite, unless SQSONCE_TEST_DYNAMODB_SERVER says
# otherwise). Otherwise a private server (dynalite, see scripts/dynalite/)
# is installed if needed, started on 127.0.0.1 with a free port, exported as
# SQSONCE_TEST_DYNAMODB_ENDPOINT (and SQSONCE_TEST_DYNAMODB_SERVER=dynalite)
# for CMD, and stopped by its PID when this script exits, whatever the
# outcome. The exit status is CMD's.
#
# It composes with scripts/with-sqs.sh: scripts/with-sqs.sh
# scripts/with-dynalite.sh go test ./... has both servers up.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dynalite_dir="$script_dir/dynalite"
# shellcheck source-path=SCRIPTDIR source=lib/server.sh
source "$script_dir/lib/server.sh"

check_args "$@"

# healthy URL: succeeds if a GET of URL answers with a 2xx status within 2 s
# (dynalite answers GET / with "healthy: ...").
healthy() { http_ok "${1%/}/"; }

if [[ -n "${SQSONCE_TEST_DYNAMODB_ENDPOINT:-}" ]]; then
	if healthy "$SQSONCE_TEST_DYNAMODB_ENDPOINT"; then
		exec "$@"
	fi
	log "SQSONCE_TEST_DYNAMODB_ENDPOINT=$SQSONCE_TEST_DYNAMODB_ENDPOINT does not answer; starting a local server instead"
fi

install_node_server "the local DynamoDB server" "$dynalite_dir" dynalite
start_node_server "the local DynamoDB server" "$dynalite_dir" SQSONCE_DYNALITE_PARENT_PID DYNALITE_PORT healthy
export SQSONCE_TEST_DYNAMODB_ENDPOINT="$endpoint"
export SQSONCE_TEST_DYNAMODB_SERVER=dynalite

run_command "$@"
