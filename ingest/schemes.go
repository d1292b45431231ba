package ingest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// Header names of the schemes.
const (
	headerStripe      = "Stripe-Signature"
	headerGitHub      = "X-Hub-Signature-256"
	headerGitHubSHA1  = "X-Hub-Signature"
	headerWebhookID   = "webhook-id" // as the specification spells them; h.Get canonicalises
	headerWebhookTime = "webhook-timestamp"
	headerWebhookSig  = "webhook-signature"
	headerSvixID      = "svix-id"
	headerSvixTime    = "svix-timestamp"
	headerSvixSig     = "svix-signature"
)

// dot separates the signed parts of stripe and standard.
var dot = []byte{'.'}

// verifyStripe checks the Stripe-Signature header.
func (v *Verifier) verifyStripe(h http.Header, body []byte, now time.Time) error {
	value := h.Get(headerStripe)
	switch {
	case value == "":
		return sigErrorf("no %s header", headerStripe)
	case len(value) > maxHeaderLen:
		return sigErrorf("%s header longer than %d bytes", headerStripe, maxHeaderLen)
	}
	var (
		ts    string
		haveT bool
		sigs  [][]byte
		count int // v1 entries, decodable or not
	)
	for part := range strings.SplitSeq(value, ",") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "t":
			if haveT {
				return timestampErrorf("%s header has more than one t", headerStripe)
			}
			ts, haveT = strings.TrimSpace(val), true
		case "v1":
			if count++; count > maxSignatures {
				return sigErrorf("%s header has more than %d v1 signatures", headerStripe, maxSignatures)
			}
			if sig, ok := decodeHex(strings.TrimSpace(val)); ok {
				sigs = append(sigs, sig)
			}
		}
	}
	if count == 0 {
		return sigErrorf("%s header has no v1 signature", headerStripe)
	}
	if !haveT {
		return timestampErrorf("%s header has no t", headerStripe)
	}
	t, ok := parseUnix(ts)
	if !ok {
		return timestampErrorf("%s t is not a unix time in seconds", headerStripe)
	}
	if !v.matches(sigs, []byte(ts), dot, body) {
		return sigErrorf("no %s v1 signature matched", headerStripe)
	}
	return checkAge(t, now, v.tolerance)
}

// verifyGitHub checks the X-Hub-Signature-256 header.
func (v *Verifier) verifyGitHub(h http.Header, body []byte) error {
	value := h.Get(headerGitHub)
	switch {
	case value == "" && h.Get(headerGitHubSHA1) != "":
		return sigErrorf("no %s header (%s, SHA-1, is not accepted)", headerGitHub, headerGitHubSHA1)
	case value == "":
		return sigErrorf("no %s header", headerGitHub)
	case len(value) > maxHeaderLen:
		return sigErrorf("%s header longer than %d bytes", headerGitHub, maxHeaderLen)
	}
	enc, ok := strings.CutPrefix(strings.TrimSpace(value), "sha256=")
	if !ok {
		return sigErrorf("%s header does not start with sha256=", headerGitHub)
	}
	sig, ok := decodeHex(enc)
	if !ok {
		return sigErrorf("%s header is not sha256= and %d hex digits", headerGitHub, 2*sha256.Size)
	}
	if !v.matches([][]byte{sig}, body) {
		return sigErrorf("%s signature did not match", headerGitHub)
	}
	return nil
}

// verifyHMAC checks the configured header of SchemeHMACSHA256.
func (v *Verifier) verifyHMAC(h http.Header, body []byte) error {
	value := h.Get(v.header)
	switch {
	case value == "":
		return sigErrorf("no %s header", v.header)
	case len(value) > maxHeaderLen:
		return sigErrorf("%s header longer than %d bytes", v.header, maxHeaderLen)
	}
	enc := strings.TrimSpace(value)
	if len(enc) >= len("sha256=") && strings.EqualFold(enc[:len("sha256=")], "sha256=") {
		enc = enc[len("sha256="):]
	}
	sig, ok := decodeHMAC(enc)
	if !ok {
		return sigErrorf("%s header is not an HMAC-SHA256 in hex or base64", v.header)
	}
	if !v.matches([][]byte{sig}, body) {
		return sigErrorf("%s signature did not match", v.header)
	}
	return nil
}

// standardHeaders names the three headers of Standard Webhooks, in the
// webhook-* or the svix-* family.
type standardHeaders struct {
	id, ts, sig string
}

// verifyStandard checks the Standard Webhooks headers and returns the id
// that was signed: the webhook-id, or the svix-id when the svix-* headers
// were read.
func (v *Verifier) verifyStandard(h http.Header, body []byte, now time.Time) (string, error) {
	names := standardHeaders{headerWebhookID, headerWebhookTime, headerWebhookSig}
	if h.Get(headerWebhookID) == "" && h.Get(headerWebhookTime) == "" && h.Get(headerWebhookSig) == "" &&
		(h.Get(headerSvixID) != "" || h.Get(headerSvixTime) != "" || h.Get(headerSvixSig) != "") {
		names = standardHeaders{headerSvixID, headerSvixTime, headerSvixSig}
	}
	id, ts, value := h.Get(names.id), h.Get(names.ts), h.Get(names.sig)
	switch {
	case id == "":
		return "", sigErrorf("no %s header", names.id)
	case len(id) > maxHeaderLen:
		return "", sigErrorf("%s header longer than %d bytes", names.id, maxHeaderLen)
	case strings.Contains(id, "."):
		// The signed content is "<id>.<timestamp>.<body>": a full stop
		// in the id would let one signature stand for another id and
		// timestamp.
		return "", sigErrorf("%s header holds a full stop", names.id)
	case value == "":
		return "", sigErrorf("no %s header", names.sig)
	case len(value) > maxHeaderLen:
		return "", sigErrorf("%s header longer than %d bytes", names.sig, maxHeaderLen)
	}
	var (
		sigs  [][]byte
		count int // v1 entries, decodable or not
	)
	for entry := range strings.FieldsSeq(value) {
		version, enc, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if count++; count > maxSignatures {
			return "", sigErrorf("%s header has more than %d v1 signatures", names.sig, maxSignatures)
		}
		if sig, ok := decodeBase64(base64.StdEncoding, enc); ok {
			sigs = append(sigs, sig)
		}
	}
	if count == 0 {
		return "", sigErrorf("%s header has no v1 signature", names.sig)
	}
	if ts == "" {
		return "", timestampErrorf("no %s header", names.ts)
	}
	t, ok := parseUnix(ts)
	if !ok {
		return "", timestampErrorf("%s header is not a unix time in seconds", names.ts)
	}
	if !v.matches(sigs, []byte(id), dot, []byte(ts), dot, body) {
		return "", sigErrorf("no %s v1 signature matched", names.sig)
	}
	if err := checkAge(t, now, v.tolerance); err != nil {
		return "", err
	}
	return id, nil
}

// decodeHex decodes a SHA-256 sized signature from hex digits of either
// case.
func decodeHex(s string) ([]byte, bool) {
	if len(s) != hex.EncodedLen(sha256.Size) {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// decodeBase64 decodes a SHA-256 sized signature with enc, strictly (the
// unused bits of the last character must be zero).
func decodeBase64(enc *base64.Encoding, s string) ([]byte, bool) {
	if len(s) != enc.EncodedLen(sha256.Size) {
		return nil, false
	}
	b, err := enc.Strict().DecodeString(s)
	return b, err == nil && len(b) == sha256.Size
}

// decodeHMAC decodes the signature of SchemeHMACSHA256: 64 hex digits, or
// base64 of 32 bytes in the standard or URL alphabet, padded or not.
func decodeHMAC(s string) ([]byte, bool) {
	if len(s) == hex.EncodedLen(sha256.Size) {
		return decodeHex(s)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, ok := decodeBase64(enc, s); ok {
			return b, true
		}
	}
	return nil, false
}
