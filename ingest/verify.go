package ingest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Scheme names, as in the config's `verify` key.
const (
	// SchemeStripe verifies the Stripe-Signature header:
	// "t=<unix>,v1=<hex>[,v1=<hex>...]", an HMAC-SHA256 of "<t>.<body>"
	// keyed with the whole secret string (whsec_... as bytes).
	SchemeStripe = "stripe"

	// SchemeGitHub verifies the X-Hub-Signature-256 header:
	// "sha256=<hex>", an HMAC-SHA256 of the body. It signs no timestamp.
	SchemeGitHub = "github"

	// SchemeStandard verifies Standard Webhooks (Svix and others): the
	// webhook-id, webhook-timestamp and webhook-signature headers, the last
	// holding "v1,<base64> v1,<base64>...", each an HMAC-SHA256 of
	// "<id>.<timestamp>.<body>". The key is the base64-decoded part of the
	// secret after "whsec_" (a secret without the prefix is decoded as it
	// is).
	SchemeStandard = "standard"

	// SchemeHMACSHA256 verifies a configured header holding an HMAC-SHA256
	// of the body in hex or base64 (standard or URL alphabet, padded or
	// not), optionally prefixed "sha256=".
	SchemeHMACSHA256 = "hmac-sha256"

	// SchemeNone verifies nothing. It must be chosen explicitly.
	SchemeNone = "none"
)

// DefaultTolerance is how far a signed timestamp may be from now (either
// way) for schemes that sign one.
const DefaultTolerance = 5 * time.Minute

const (
	// maxHeaderLen is the longest signature header Verify reads, in bytes.
	maxHeaderLen = 8 << 10

	// maxSignatures is the most signatures Verify compares from one
	// header.
	maxSignatures = 16

	// standardPrefix marks a Standard Webhooks secret.
	standardPrefix = "whsec_"
)

// Errors of this package. Callers test for them with errors.Is.
var (
	// ErrInvalidConfig is wrapped by NewVerifier's errors and by the
	// secret readers' when a configuration cannot be used: the text after
	// it names what is wrong. Verify returns it for a Verifier that was
	// not built by NewVerifier.
	ErrInvalidConfig = errors.New("invalid ingest configuration")

	// ErrSignature is wrapped by Verify's errors when the request is not
	// signed by a configured secret: a missing, oversized or malformed
	// signature header, or no signature that matches.
	ErrSignature = errors.New("signature not valid")

	// ErrTimestamp is wrapped by Verify's errors when the signed timestamp
	// is missing or malformed, or (the signature having matched) further
	// from now than the tolerance.
	ErrTimestamp = errors.New("signature timestamp not acceptable")
)

// VerifyConfig configures a Verifier.
type VerifyConfig struct {
	// Scheme is one of the Scheme* names. Required.
	Scheme string

	// Secrets are the shared secrets; a request that verifies under any
	// one of them is accepted, so that a secret can be rotated. At least
	// one, none of them empty, is required except for SchemeNone, which
	// takes none.
	Secrets [][]byte

	// SignatureHeader names the header holding the signature, for
	// SchemeHMACSHA256 only, where it is required. Its case does not
	// matter.
	SignatureHeader string

	// Tolerance is how far a signed timestamp may be from now, for
	// SchemeStripe and SchemeStandard only. Zero means DefaultTolerance.
	// Timestamps are whole seconds, so a tolerance counts whole seconds
	// and one under a second is refused.
	Tolerance time.Duration
}

// Verifier checks the signature of one request at a time. It does not
// change after NewVerifier and is safe for concurrent use. The zero
// Verifier and a nil *Verifier refuse every request with ErrInvalidConfig.
type Verifier struct {
	scheme    string
	keys      [][]byte      // HMAC keys, one per secret
	header    string        // SchemeHMACSHA256: the signature header
	tolerance time.Duration // SchemeStripe, SchemeStandard
}

// NewVerifier validates cfg and returns a Verifier for it. It fails, with
// an error wrapping ErrInvalidConfig that names what is wrong, on an
// unknown scheme, no secrets (or secrets given to SchemeNone), an empty
// secret, a Standard Webhooks secret that is not base64, a missing or
// invalid SignatureHeader for SchemeHMACSHA256 (or one given to another
// scheme), and a negative tolerance (or one given to a scheme that signs no
// timestamp). The Verifier keeps copies of the secrets: changing
// cfg.Secrets afterwards has no effect on it.
func NewVerifier(cfg VerifyConfig) (*Verifier, error) {
	switch cfg.Scheme {
	case SchemeStripe, SchemeGitHub, SchemeStandard, SchemeHMACSHA256, SchemeNone:
	case "":
		return nil, fmt.Errorf("%w: no verify scheme (want %s)", ErrInvalidConfig, schemeNames)
	default:
		return nil, fmt.Errorf("%w: unknown verify scheme %q (want %s)", ErrInvalidConfig, cfg.Scheme, schemeNames)
	}
	v := &Verifier{scheme: cfg.Scheme}

	if cfg.Scheme == SchemeNone {
		if len(cfg.Secrets) > 0 {
			return nil, fmt.Errorf("%w: verify scheme none takes no secrets", ErrInvalidConfig)
		}
	} else if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("%w: verify scheme %s needs at least one secret", ErrInvalidConfig, cfg.Scheme)
	}
	for i, s := range cfg.Secrets {
		key, err := hmacKey(cfg.Scheme, s)
		if err != nil {
			return nil, fmt.Errorf("%w: secret %d: %v", ErrInvalidConfig, i+1, err)
		}
		v.keys = append(v.keys, key)
	}

	switch {
	case cfg.Scheme == SchemeHMACSHA256 && cfg.SignatureHeader == "":
		return nil, fmt.Errorf("%w: verify scheme hmac-sha256 needs a signature header", ErrInvalidConfig)
	case cfg.Scheme == SchemeHMACSHA256 && !isToken(cfg.SignatureHeader):
		return nil, fmt.Errorf("%w: signature header %q is not a valid header name", ErrInvalidConfig, cfg.SignatureHeader)
	case cfg.Scheme != SchemeHMACSHA256 && cfg.SignatureHeader != "":
		return nil, fmt.Errorf("%w: a signature header is for verify scheme hmac-sha256 only, not %s", ErrInvalidConfig, cfg.Scheme)
	}
	v.header = http.CanonicalHeaderKey(cfg.SignatureHeader)

	switch {
	case cfg.Tolerance < 0:
		return nil, fmt.Errorf("%w: tolerance %v is negative", ErrInvalidConfig, cfg.Tolerance)
	case cfg.Tolerance > 0 && cfg.Tolerance < time.Second:
		return nil, fmt.Errorf("%w: tolerance %v is under a second (timestamps are whole seconds)", ErrInvalidConfig, cfg.Tolerance)
	case cfg.Tolerance > 0 && cfg.Scheme != SchemeStripe && cfg.Scheme != SchemeStandard:
		return nil, fmt.Errorf("%w: verify scheme %s signs no timestamp; a tolerance is for stripe and standard", ErrInvalidConfig, cfg.Scheme)
	case cfg.Tolerance == 0:
		v.tolerance = DefaultTolerance
	default:
		v.tolerance = cfg.Tolerance
	}
	return v, nil
}

// schemeNames lists the schemes for error texts.
const schemeNames = "stripe, github, standard, hmac-sha256 or none"

// hmacKey returns the HMAC key of one configured secret: a copy of the
// secret, or for SchemeStandard the secret decoded from base64 after the
// whsec_ prefix. Its errors never quote the secret.
func hmacKey(scheme string, secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, errors.New("empty")
	}
	if scheme != SchemeStandard {
		return bytes.Clone(secret), nil
	}
	enc := bytes.TrimPrefix(secret, []byte(standardPrefix))
	key := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Strict().Decode(key, enc)
	switch {
	case err != nil:
		return nil, errors.New("not base64 after the whsec_ prefix, as a Standard Webhooks secret is")
	case n == 0:
		return nil, errors.New("empty after the whsec_ prefix")
	}
	return key[:n], nil
}

// isToken reports whether s is a valid HTTP header name (an RFC 9110
// token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Scheme returns the configured scheme, "" for a nil or zero Verifier.
func (v *Verifier) Scheme() string {
	if v == nil {
		return ""
	}
	return v.scheme
}

// Verify checks the request's headers h and raw body at time now. It
// returns nil when the signature is valid under one of the secrets and,
// where the scheme signs a timestamp, the timestamp is within the
// tolerance of now, either way. Otherwise it returns an error wrapping
// ErrSignature (a missing, oversized or malformed header, more than 16
// signatures, no signature matched) or ErrTimestamp (a missing or malformed
// timestamp; or, the signature having matched, a stale or future one).
// Error texts say what is wrong and which header; they never hold a secret
// or a computed signature. A nil h is a request without headers. Verify
// does not modify h or body.
func (v *Verifier) Verify(h http.Header, body []byte, now time.Time) error {
	_, err := v.verify(h, body, now)
	return err
}

// verify is Verify that also returns the event id the signature covers
// beside the body: for SchemeStandard the webhook-id (or svix-id) that was
// signed with the timestamp and the body; "" for the other schemes, which
// sign no header that holds an id.
func (v *Verifier) verify(h http.Header, body []byte, now time.Time) (signedID string, err error) {
	if v == nil || v.scheme == "" {
		return "", fmt.Errorf("%w: verifier not built by NewVerifier", ErrInvalidConfig)
	}
	switch v.scheme {
	case SchemeStripe:
		return "", v.verifyStripe(h, body, now)
	case SchemeGitHub:
		return "", v.verifyGitHub(h, body)
	case SchemeStandard:
		return v.verifyStandard(h, body, now)
	case SchemeHMACSHA256:
		return "", v.verifyHMAC(h, body)
	default: // SchemeNone
		return "", nil
	}
}

// matches reports whether any of sigs is the HMAC-SHA256 of the
// concatenation of parts under any of the keys. It computes one HMAC per
// key and compares every pair in constant time.
func (v *Verifier) matches(sigs [][]byte, parts ...[]byte) bool {
	if len(sigs) == 0 {
		return false
	}
	var sum [sha256.Size]byte
	ok := false
	for _, key := range v.keys {
		mac := hmac.New(sha256.New, key)
		for _, p := range parts {
			mac.Write(p)
		}
		mac.Sum(sum[:0])
		for _, sig := range sigs {
			if hmac.Equal(sum[:], sig) {
				ok = true
			}
		}
	}
	return ok
}

// parseUnix parses a signed timestamp: unix seconds in decimal digits,
// nothing else (no sign, no spaces, no fraction).
func parseUnix(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	t, err := strconv.ParseInt(s, 10, 64)
	return t, err == nil
}

// checkAge returns an error wrapping ErrTimestamp when the unix time ts is
// more than tol from now, either way, counting whole seconds. It does not
// overflow for any ts and now.
func checkAge(ts int64, now time.Time, tol time.Duration) error {
	n := now.Unix()
	limit := uint64(tol / time.Second)
	if ts <= n {
		// n-ts may not fit in an int64; as uint64 it is exact.
		if age := uint64(n) - uint64(ts); age > limit {
			return fmt.Errorf("%w: timestamp %ds old, tolerance %v", ErrTimestamp, age, tol)
		}
		return nil
	}
	if ahead := uint64(ts) - uint64(n); ahead > limit {
		return fmt.Errorf("%w: timestamp %ds in the future, tolerance %v", ErrTimestamp, ahead, tol)
	}
	return nil
}

// sigErrorf returns an error wrapping ErrSignature.
func sigErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSignature, fmt.Sprintf(format, args...))
}

// timestampErrorf returns an error wrapping ErrTimestamp.
func timestampErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTimestamp, fmt.Sprintf(format, args...))
}
