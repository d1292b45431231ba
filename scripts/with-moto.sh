#!/usr/bin/env bash
# Run a command against moto, a second implementation of the AWS APIs that
# sqsonce talks to.
#
# Usage: scripts/with-moto.sh CMD [ARGS...]
#
# Starts a private moto server (Python moto 5.x, see scripts/moto/server.py)
# on 127.0.0.1 with a free port, and runs CMD with SQS, SNS, S3 and DynamoDB
# all at that one endpoint:
#
#   SQSONCE_TEST_SQS_ENDPOINT       SQS, and SNS and S3 (internal/sqstest)
#   SQSONCE_TEST_DYNAMODB_ENDPOINT  DynamoDB (internal/dynamotest)
#   SQSONCE_TEST_SQS_SERVER=moto       which implementation the tests talk to,
#   SQSONCE_TEST_DYNAMODB_SERVER=moto  where it differs from AWS
#
# These replace whatever the environment held (a CI run exports a fauxqs
# endpoint for everything else). The server is stopped by its PID when this
# script exits, whatever the outcome; the exit status is CMD's.
#
# moto must be installed for the Python that runs it, SQSONCE_MOTO_PYTHON
# (default python3): `python3 -m pip install "moto[server]"`. Without it
# this script fails and says so; it never lets CMD run without the server.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/server.sh
source "$script_dir/lib/server.sh"

check_args "$@"

python="${SQSONCE_MOTO_PYTHON:-python3}"
command -v "$python" >/dev/null 2>&1 ||
	die "$python is required to run moto (scripts/moto/server.py): install Python 3, then moto with: $python -m pip install \"moto[server]\""

# healthy URL: succeeds if moto's own API (URL/moto-api/) answers with a
# 2xx status within 2 s, which no other server on the port would.
healthy() { http_ok "${1%/}/moto-api/"; }

start_server "moto" moto SQSONCE_MOTO_PARENT_PID SQSONCE_MOTO_PORT healthy "$python" "$script_dir/moto/server.py"
export SQSONCE_TEST_SQS_ENDPOINT="$endpoint"
export SQSONCE_TEST_DYNAMODB_ENDPOINT="$endpoint"
export SQSONCE_TEST_SQS_SERVER=moto
export SQSONCE_TEST_DYNAMODB_SERVER=moto
log "moto at $endpoint"

run_command "$@"
