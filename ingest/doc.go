// Package ingest receives webhooks for `sqsonce ingest`: it checks each
// request's signature, derives the event's operation key from what the
// signature covers, and enqueues the event (see Server and Source).
//
// A key is taken only from signed bytes, so that a captured request re-sent
// with other headers is the same operation (answered 200, suppressed
// downstream), never a new one: for github (which signs only the body) a
// SHA-256 of the body, unless an id in the body is named; for stripe the
// body's /id; for standard the signed webhook-id; for hmac-sha256 an id in
// the body or a SHA-256 of it. A header that no signature covers, such as
// X-GitHub-Delivery, is never a key. Each source's keys begin with its name
// and a colon unless Source.KeyPrefix says otherwise, so that two senders
// with alike ids keep apart.
//
// A Verifier is built once from a VerifyConfig and checks one request at a
// time with Verify, given the request's headers, its raw body exactly as
// received (never a re-encoded JSON document) and the time to check
// timestamps against. The schemes are:
//
//   - stripe: the Stripe-Signature header, "t=<unix>,v1=<hex>[,v1=<hex>...]",
//     an HMAC-SHA256 of "<t>.<body>" keyed with the whole secret string
//     (whsec_... included, as Stripe's libraries do). v0 entries and unknown
//     keys are ignored.
//   - github: the X-Hub-Signature-256 header, "sha256=<hex>", an HMAC-SHA256
//     of the body. It signs no timestamp. The older X-Hub-Signature header
//     (SHA-1) is refused.
//   - standard: Standard Webhooks (Svix and others): the webhook-id,
//     webhook-timestamp and webhook-signature headers, the last holding
//     space-separated "v1,<base64>" entries, each an HMAC-SHA256 of
//     "<id>.<timestamp>.<body>" keyed with the base64-decoded part of the
//     secret after "whsec_". Other versions (v1a, ...) are ignored. When no
//     webhook-* header is present, Svix's svix-id, svix-timestamp and
//     svix-signature are read instead.
//   - hmac-sha256: a configured header holding an HMAC-SHA256 of the body,
//     in hex or base64, optionally prefixed "sha256=".
//   - none: no verification; it has to be chosen explicitly.
//
// Several secrets may be configured for rotation: a request is accepted
// when any one of them verifies it, and with stripe and standard, whose
// senders put one signature per secret into the header while they rotate,
// when any of the header's signatures matches. Signatures are compared in
// constant time.
//
// Verify returns an error wrapping ErrSignature when the request is not
// signed by a configured secret (a missing or malformed header, no matching
// signature) and one wrapping ErrTimestamp when its signed timestamp is
// missing, malformed or further from now than the tolerance. The signature
// is checked before the age of the timestamp, so ErrTimestamp for a stale or
// future timestamp means the signature itself was valid: a replay, or a
// clock off on one side. Both are the sender's fault and are answered with
// 401; an error wrapping ErrInvalidConfig from Verify means the Verifier was
// not built by NewVerifier. Error texts say what is wrong and never hold a
// secret or a computed signature.
//
// The work of one Verify is bounded whatever the request holds: a signature
// header longer than 8 KiB or holding more than 16 signatures is refused
// before any HMAC is computed, and Verify computes one HMAC per configured
// secret.
package ingest
