#!/usr/bin/env bash
# Send signed webhooks to `sqsonce ingest` as GitHub, Stripe and a Standard
# Webhooks sender (Svix and others) would, each twice (senders retry), the
# GitHub one once more under another delivery id (a captured request
# replayed), and a forged one. These are the requests of docs/webhooks.md
# ("Running it").
#
# Usage: scripts/demo/webhooks.sh BASE_URL
# with GITHUB_WEBHOOK_SECRET, STRIPE_WEBHOOK_SECRET and STANDARD_WEBHOOK_SECRET
# set. Needs curl and openssl.
set -euo pipefail
base=${1:?usage: webhooks.sh BASE_URL}

# post PATH BODY HEADER...: POST BODY to PATH, print the status and answer.
post() {
	local path=$1 body=$2
	shift 2
	local args=()
	for h in "$@"; do args+=(-H "$h"); done
	local answer reply
	answer=$(curl -sS -w '\n%{http_code}' -X POST "$base$path" \
		-H 'Content-Type: application/json' "${args[@]}" --data-binary "$body")
	reply=$(printf '%s' "${answer%$'\n'*}") # without the trailing newline
	printf 'POST %-16s %s %s\n' "$path" "${answer##*$'\n'}" "$reply"
}

# GitHub: X-Hub-Signature-256 is the HMAC-SHA256 of the body, in hex. It
# signs nothing else, so the key is the body's SHA-256 ("github:sha256:...");
# X-GitHub-Delivery travels beside it for support. A copy of the request
# under another delivery id is the same event: answered 200, the same key.
body='{"action":"opened","pull_request":{"number":7}}'
sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$GITHUB_WEBHOOK_SECRET" | sed 's/^.* //')
for delivery in 72d3162e-cc78-11e3-81ab-4c9367dc0958 72d3162e-cc78-11e3-81ab-4c9367dc0958 replayed-1; do
	post /hooks/github "$body" "X-GitHub-Delivery: $delivery" "X-Hub-Signature-256: sha256=$sig"
done

# Stripe: Stripe-Signature holds a timestamp and the HMAC-SHA256 of
# "timestamp.body"; the event id is the body's /id ("stripe:evt_...").
body='{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"payment_intent.succeeded","data":{"object":{"customer":"cus_9s6XKzkNRiz8i3"}}}'
t=$(date +%s)
sig=$(printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$STRIPE_WEBHOOK_SECRET" | sed 's/^.* //')
for _ in 1 2; do
	post /hooks/stripe "$body" "Stripe-Signature: t=$t,v1=$sig"
done

# Standard Webhooks: webhook-signature is "v1," and the base64 HMAC-SHA256,
# keyed with the base64-decoded secret after "whsec_", of "id.timestamp.body";
# the signed webhook-id is the event id ("standard:msg_...").
body='{"type":"invoice.paid","data":{"invoice":"in_42"}}'
id=msg_2KWPBgLlAfxdpx2AI54pPJ85f4W
t=$(date +%s)
key=$(printf '%s' "${STANDARD_WEBHOOK_SECRET#whsec_}" | base64 -d | xxd -p -c 256)
sig=$(printf '%s.%s.%s' "$id" "$t" "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -binary | base64)
for _ in 1 2; do
	post /hooks/standard "$body" "webhook-id: $id" "webhook-timestamp: $t" "webhook-signature: v1,$sig"
done

# A forged request: refused with 401, nothing is queued.
post /hooks/github '{"action":"deleted"}' "X-GitHub-Delivery: forged-1" "X-Hub-Signature-256: sha256=$(printf '0%.0s' {1..64})"
