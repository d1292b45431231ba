#!/usr/bin/env bash
# A local SQS-compatible server to try sqsonce on, in the foreground.
#
# Usage: scripts/local-sqs.sh [PORT]     (make local-sqs [SQS_PORT=PORT])
#
# Starts the server the tests use (fauxqs, scripts/sqs/, installed from npm
# on first use) on 127.0.0.1:PORT (default 9324), creates the queue
# first-handler with the dead-letter queue first-handler-dlq (after 5
# receives), prints a minimal sqsonce configuration for them and the
# variables to export, and runs until Ctrl-C (or SIGTERM) stops it. The
# queues live in the server's memory: they are gone when it stops.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sqs_dir="$script_dir/sqs"
# shellcheck source-path=SCRIPTDIR source=lib/server.sh
source "$script_dir/lib/server.sh"

port="${1:-9324}"
[[ "$port" =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || die "PORT must be a number from 1 to 65535, got \"$port\""
endpoint="http://127.0.0.1:$port"

install_node_server "the local SQS server" "$sqs_dir" fauxqs

server_log="$(mktemp "${TMPDIR:-/tmp}/sqsonce-local-sqs.XXXXXX")"
FAUXQS_PORT="$port" node "$sqs_dir/server.mjs" >"$server_log" 2>&1 </dev/null &
server_pid=$!
stop() {
	kill -TERM "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	rm -f "$server_log"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((i = 0; ; i++)); do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		log "error: the server did not start (is port $port taken? make local-sqs SQS_PORT=N picks another); its output:"
		cat "$server_log" >&2
		exit 1
	fi
	grep -q '^listening ' "$server_log" && http_ok "$endpoint/health" && break
	((i < 300)) || die "the server did not answer within 30 s"
	sleep 0.1
done

# Two CreateQueue calls in SQS's JSON protocol; the server checks no
# signature. Prints the queue's URL.
queue_url="$(node - "$endpoint" <<'EOF'
const endpoint = process.argv[2];
async function sqs(op, body) {
  const r = await fetch(endpoint + "/", {
    method: "POST",
    headers: { "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS." + op },
    body: JSON.stringify(body),
  });
  const out = await r.json();
  if (!r.ok) throw new Error(`${op}: ${r.status} ${JSON.stringify(out)}`);
  return out;
}
const dlq = await sqs("CreateQueue", { QueueName: "first-handler-dlq" });
const { Attributes } = await sqs("GetQueueAttributes", { QueueUrl: dlq.QueueUrl, AttributeNames: ["QueueArn"] });
const q = await sqs("CreateQueue", {
  QueueName: "first-handler",
  Attributes: { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes.QueueArn, maxReceiveCount: 5 }) },
});
console.log(q.QueueUrl);
EOF
)"

cat <<EOF
A local SQS-compatible server listens at $endpoint (Ctrl-C stops it; its queues live in memory).
Queue first-handler, dead-letter queue first-handler-dlq (after 5 receives).

# sqsonce.toml
[queue]
url = "$queue_url"
endpoint = "$endpoint"

[ledger]
path = "ledger.db"

[handler]
type = "exec"
command = ["./handler.sh"]

# In the shell that runs sqsonce (the local server takes any credentials):
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
EOF

wait "$server_pid"
