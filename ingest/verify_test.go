package ingest_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ingest"
)

// testNow is the clock of the tests that compute their own vectors.
var testNow = time.Unix(1_700_000_000, 0)

// The secrets of the computed vectors. The standard ones are base64 of 24
// random-looking bytes, as Standard Webhooks secrets are.
const (
	stripeSecret    = "whsec_test_5f1c0e9a7d3b44c2a8e6"
	stripeSecret2   = "whsec_test_rotated_91b2c3d4e5f6"
	githubSecret    = "gh webhook secret 1"
	githubSecret2   = "gh webhook secret 2"
	standardSecret  = "whsec_C2FtcGxlLXN0YW5kYXJkLXNlY3JldDE="
	standardSecret2 = "whsec_c2FtcGxlLXN0YW5kYXJkLXNlY3JldDI="
)

// body is a request body with bytes JSON re-encoding would change.
var body = []byte(`{"id":"evt_1", "amount": 1.50,"note":"caf\u00e9 <b>"}` + "\n")

// mac returns HMAC-SHA256 of the concatenated parts under key.
func mac(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// stripeSig returns a v1 signature of body at t, as Stripe computes it.
func stripeSig(secret string, t int64, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), strconv.FormatInt(t, 10), ".", string(body)))
}

// standardKey decodes a Standard Webhooks secret as the specification says.
func standardKey(t testing.TB, secret string) []byte {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// standardSig returns one "v1,<base64>" entry for id, ts and body.
func standardSig(key []byte, id, ts string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ".", ts, ".", string(body)))
}

// newVerifier builds a Verifier or fails the test.
func newVerifier(t testing.TB, cfg ingest.VerifyConfig) *ingest.Verifier {
	t.Helper()
	v, err := ingest.NewVerifier(cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// secrets converts strings to the config's form.
func secrets(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = []byte(s[i])
	}
	return out
}

// header builds a header from name, value pairs.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// verifyCase is one request and the outcome Verify must give it.
type verifyCase struct {
	name   string
	h      http.Header
	body   []byte
	now    time.Time // zero means testNow
	want   error     // nil, ErrSignature or ErrTimestamp
	reason string    // part of the error text
}

// runCases checks each case against v, and that no error text holds a
// secret or any of the signatures in hide.
func runCases(t *testing.T, v *ingest.Verifier, cases []verifyCase, hide ...string) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			now := c.now
			if now.IsZero() {
				now = testNow
			}
			err := v.Verify(c.h, c.body, now)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
			other := ingest.ErrTimestamp
			if c.want == ingest.ErrTimestamp {
				other = ingest.ErrSignature
			}
			if errors.Is(err, other) {
				t.Errorf("Verify = %v, wraps %v too", err, other)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("Verify = %q, want it to say %q", err, c.reason)
			}
			for _, s := range hide {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("Verify = %q, holds a secret or signature", err)
				}
			}
		})
	}
}

func TestVerifier_Stripe(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)})
	now := testNow.Unix()
	sig := stripeSig(stripeSecret, now, body)
	other := stripeSig(stripeSecret2, now, body)
	valid := fmt.Sprintf("t=%d,v1=%s", now, sig)
	changed := append([]byte(nil), body...)
	changed[5] ^= 1
	at := func(t int64) string { return fmt.Sprintf("t=%d,v1=%s", t, stripeSig(stripeSecret, t, body)) }

	runCases(t, v, []verifyCase{
		{"Valid", header("Stripe-Signature", valid), body, time.Time{}, nil, ""},
		{"LowerCaseHeaderName", header("stripe-signature", valid), body, time.Time{}, nil, ""},
		{"UpperCaseHex", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, strings.ToUpper(sig))), body, time.Time{}, nil, ""},
		{"SpacesV0AndUnknownKeys", header("Stripe-Signature", fmt.Sprintf(" t=%d , v1=%s ,v0=%s, scheme=x,junk", now, sig, strings.Repeat("0", 64))), body, time.Time{}, nil, ""},
		{"V1BeforeT", header("Stripe-Signature", fmt.Sprintf("v1=%s,t=%d", sig, now)), body, time.Time{}, nil, ""},
		{"RotationSecondEntryMatches", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s,v1=%s", now, other, sig)), body, time.Time{}, nil, ""},
		{"RotationFirstEntryMatches", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s,v1=%s", now, sig, other)), body, time.Time{}, nil, ""},
		{"SixteenSignatures", header("Stripe-Signature", fmt.Sprintf("t=%d", now)+strings.Repeat(",v1="+other, 15)+",v1="+sig), body, time.Time{}, nil, ""},
		{"OldAtTolerance", header("Stripe-Signature", at(now-300)), body, time.Time{}, nil, ""},
		{"FutureAtTolerance", header("Stripe-Signature", at(now+300)), body, time.Time{}, nil, ""},
		{"EmptyBody", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig(stripeSecret, now, nil))), nil, time.Time{}, nil, ""},

		{"BodyChanged", header("Stripe-Signature", valid), changed, time.Time{}, ingest.ErrSignature, "no Stripe-Signature v1 signature matched"},
		{"BodyTruncated", header("Stripe-Signature", valid), body[:len(body)-1], time.Time{}, ingest.ErrSignature, "matched"},
		{"OtherSecret", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, other)), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"TimestampChanged", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now+1, sig)), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"V0Only", header("Stripe-Signature", fmt.Sprintf("t=%d,v0=%s", now, sig)), body, time.Time{}, ingest.ErrSignature, "no v1 signature"},
		{"V1NotHex", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, strings.Repeat("z", 64))), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"V1Short", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, sig[:62])), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"V1Empty", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=", now)), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"Missing", header("X-Other", valid), body, time.Time{}, ingest.ErrSignature, "no Stripe-Signature header"},
		{"NilHeader", nil, body, time.Time{}, ingest.ErrSignature, "no Stripe-Signature header"},
		{"Garbage", header("Stripe-Signature", "hello"), body, time.Time{}, ingest.ErrSignature, "no v1 signature"},
		{"TooLong", header("Stripe-Signature", valid+","+strings.Repeat("x", 8<<10)), body, time.Time{}, ingest.ErrSignature, "longer than 8192 bytes"},
		{"SeventeenSignatures", header("Stripe-Signature", fmt.Sprintf("t=%d", now)+strings.Repeat(",v1="+other, 16)+",v1="+sig), body, time.Time{}, ingest.ErrSignature, "more than 16 v1 signatures"},

		{"NoT", header("Stripe-Signature", "v1="+sig), body, time.Time{}, ingest.ErrTimestamp, "Stripe-Signature header has no t"},
		{"TNotInteger", header("Stripe-Signature", "t=17e8,v1="+sig), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"TNegative", header("Stripe-Signature", "t=-1,v1="+sig), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"TFraction", header("Stripe-Signature", fmt.Sprintf("t=%d.5,v1=%s", now, sig)), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"TEmpty", header("Stripe-Signature", "t=,v1="+sig), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"TOverflow", header("Stripe-Signature", "t=99999999999999999999,v1="+sig), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"TTwice", header("Stripe-Signature", fmt.Sprintf("t=%d,t=%d,v1=%s", now, now, sig)), body, time.Time{}, ingest.ErrTimestamp, "more than one t"},
		{"Stale", header("Stripe-Signature", at(now-301)), body, time.Time{}, ingest.ErrTimestamp, "timestamp 301s old, tolerance 5m0s"},
		{"VeryStale", header("Stripe-Signature", at(now-412)), body, time.Time{}, ingest.ErrTimestamp, "timestamp 412s old, tolerance 5m0s"},
		{"Future", header("Stripe-Signature", at(now+301)), body, time.Time{}, ingest.ErrTimestamp, "timestamp 301s in the future, tolerance 5m0s"},
		{"TZero", header("Stripe-Signature", at(0)), body, time.Time{}, ingest.ErrTimestamp, "1700000000s old"},
		{"TMax", header("Stripe-Signature", at(1<<63-1)), body, time.Time{}, ingest.ErrTimestamp, "in the future"},
		{"FarPastNow", header("Stripe-Signature", at(1<<63-1)), body, time.Unix(-1<<62, 0), ingest.ErrTimestamp, "in the future"},
		{"StaleAndForged", header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now-3600, sig)), body, time.Time{}, ingest.ErrSignature, "matched"},
	}, stripeSecret, sig)
}

func TestVerifier_StripeRotation(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret, stripeSecret2)})
	now := testNow.Unix()
	for _, s := range []string{stripeSecret, stripeSecret2} {
		t.Run(s[len(s)-4:], func(t *testing.T) {
			t.Parallel()
			h := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig(s, now, body)))
			if err := v.Verify(h, body, testNow); err != nil {
				t.Fatalf("Verify with either secret = %v", err)
			}
		})
	}
	t.Run("Neither", func(t *testing.T) {
		t.Parallel()
		h := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig("whsec_third", now, body)))
		if err := v.Verify(h, body, testNow); !errors.Is(err, ingest.ErrSignature) {
			t.Fatalf("Verify with a third secret = %v, want ErrSignature", err)
		}
	})
}

func TestVerifier_StripeTolerance(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret), Tolerance: 10 * time.Second})
	now := testNow.Unix()
	at := func(t int64) http.Header {
		return header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", t, stripeSig(stripeSecret, t, body)))
	}
	runCases(t, v, []verifyCase{
		{"Within", at(now - 10), body, time.Time{}, nil, ""},
		{"NanosecondsDoNotCount", at(now - 10), body, testNow.Add(999 * time.Millisecond), nil, ""},
		{"Beyond", at(now - 11), body, time.Time{}, ingest.ErrTimestamp, "timestamp 11s old, tolerance 10s"},
		{"FutureBeyond", at(now + 11), body, time.Time{}, ingest.ErrTimestamp, "timestamp 11s in the future, tolerance 10s"},
	})
}

// The vector GitHub's documentation gives to test an implementation:
// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
const (
	githubDocSecret    = "It's a Secret to Everybody"
	githubDocPayload   = "Hello, World!"
	githubDocSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestVerifier_GitHubPublishedVector(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(githubDocSecret)})
	runCases(t, v, []verifyCase{
		{"Valid", header("X-Hub-Signature-256", githubDocSignature), []byte(githubDocPayload), time.Time{}, nil, ""},
		{"AnyTime", header("X-Hub-Signature-256", githubDocSignature), []byte(githubDocPayload), time.Unix(0, 0), nil, ""},
		{"PayloadChanged", header("X-Hub-Signature-256", githubDocSignature), []byte("Hello, World?"), time.Time{}, ingest.ErrSignature, "X-Hub-Signature-256 signature did not match"},
		{"LastDigitChanged", header("X-Hub-Signature-256", githubDocSignature[:len(githubDocSignature)-1]+"8"), []byte(githubDocPayload), time.Time{}, ingest.ErrSignature, "did not match"},
	}, githubDocSecret, githubDocSignature[len("sha256="):])
}

func TestVerifier_GitHub(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(githubSecret, githubSecret2)})
	sig := hex.EncodeToString(mac([]byte(githubSecret), string(body)))
	sig2 := hex.EncodeToString(mac([]byte(githubSecret2), string(body)))
	changed := append([]byte(nil), body...)
	changed[0] = '['

	runCases(t, v, []verifyCase{
		{"Valid", header("X-Hub-Signature-256", "sha256="+sig), body, time.Time{}, nil, ""},
		{"SecondSecret", header("X-Hub-Signature-256", "sha256="+sig2), body, time.Time{}, nil, ""},
		{"LowerCaseHeaderName", header("x-hub-signature-256", "sha256="+sig), body, time.Time{}, nil, ""},
		{"UpperCaseHex", header("X-Hub-Signature-256", "sha256="+strings.ToUpper(sig)), body, time.Time{}, nil, ""},
		{"SurroundingSpaces", header("X-Hub-Signature-256", " sha256="+sig+" "), body, time.Time{}, nil, ""},
		{"WithSHA1Header", header("X-Hub-Signature-256", "sha256="+sig, "X-Hub-Signature", "sha1=0000"), body, time.Time{}, nil, ""},

		{"BodyChanged", header("X-Hub-Signature-256", "sha256="+sig), changed, time.Time{}, ingest.ErrSignature, "X-Hub-Signature-256 signature did not match"},
		{"OtherSecret", header("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac([]byte("other"), string(body)))), body, time.Time{}, ingest.ErrSignature, "did not match"},
		{"Missing", header("Stripe-Signature", "sha256="+sig), body, time.Time{}, ingest.ErrSignature, "no X-Hub-Signature-256 header"},
		{"SHA1Only", header("X-Hub-Signature", "sha1="+strings.Repeat("0", 40)), body, time.Time{}, ingest.ErrSignature, "no X-Hub-Signature-256 header (X-Hub-Signature, SHA-1, is not accepted)"},
		{"NoPrefix", header("X-Hub-Signature-256", sig), body, time.Time{}, ingest.ErrSignature, "does not start with sha256="},
		{"SHA1Prefix", header("X-Hub-Signature-256", "sha1="+sig), body, time.Time{}, ingest.ErrSignature, "does not start with sha256="},
		{"UpperCasePrefix", header("X-Hub-Signature-256", "SHA256="+sig), body, time.Time{}, ingest.ErrSignature, "does not start with sha256="},
		{"Base64", header("X-Hub-Signature-256", "sha256="+base64.StdEncoding.EncodeToString(mac([]byte(githubSecret), string(body)))), body, time.Time{}, ingest.ErrSignature, "not sha256= and 64 hex digits"},
		{"Short", header("X-Hub-Signature-256", "sha256="+sig[:63]), body, time.Time{}, ingest.ErrSignature, "64 hex digits"},
		{"TwoSignatures", header("X-Hub-Signature-256", "sha256="+sig+",sha256="+sig2), body, time.Time{}, ingest.ErrSignature, "64 hex digits"},
		{"TooLong", header("X-Hub-Signature-256", "sha256="+sig+strings.Repeat(" ", 8<<10)), body, time.Time{}, ingest.ErrSignature, "longer than 8192 bytes"},
	}, githubSecret, githubSecret2, sig, sig2)
}

func TestVerifier_HMACSHA256(t *testing.T) {
	t.Parallel()
	const secret = "hmac-secret-0123456789"
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, Secrets: secrets("old secret", secret), SignatureHeader: "x-signature"})
	sum := mac([]byte(secret), string(body))
	hexSig := hex.EncodeToString(sum)
	changed := append(append([]byte(nil), body...), ' ')
	h := func(value string) http.Header { return header("X-Signature", value) }

	runCases(t, v, []verifyCase{
		{"Hex", h(hexSig), body, time.Time{}, nil, ""},
		{"HexUpperCase", h(strings.ToUpper(hexSig)), body, time.Time{}, nil, ""},
		{"HexPrefixed", h("sha256=" + hexSig), body, time.Time{}, nil, ""},
		{"HexPrefixUpperCase", h("SHA256=" + hexSig), body, time.Time{}, nil, ""},
		{"Base64", h(base64.StdEncoding.EncodeToString(sum)), body, time.Time{}, nil, ""},
		{"Base64Unpadded", h(base64.RawStdEncoding.EncodeToString(sum)), body, time.Time{}, nil, ""},
		{"Base64URL", h(base64.URLEncoding.EncodeToString(sum)), body, time.Time{}, nil, ""},
		{"Base64URLUnpadded", h(base64.RawURLEncoding.EncodeToString(sum)), body, time.Time{}, nil, ""},
		{"Base64Prefixed", h("sha256=" + base64.StdEncoding.EncodeToString(sum)), body, time.Time{}, nil, ""},
		{"HeaderNameCase", header("X-SIGNATURE", hexSig), body, time.Time{}, nil, ""},
		{"SurroundingSpaces", h("  " + hexSig + "\t"), body, time.Time{}, nil, ""},
		{"FirstSecret", h(hex.EncodeToString(mac([]byte("old secret"), string(body)))), body, time.Time{}, nil, ""},

		{"BodyChanged", h(hexSig), changed, time.Time{}, ingest.ErrSignature, "X-Signature signature did not match"},
		{"OtherSecret", h(hex.EncodeToString(mac([]byte("x"), string(body)))), body, time.Time{}, ingest.ErrSignature, "did not match"},
		{"Missing", header("X-Hub-Signature-256", "sha256="+hexSig), body, time.Time{}, ingest.ErrSignature, "no X-Signature header"},
		{"HexShort", h(hexSig[:62]), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256 in hex or base64"},
		{"HexNotHex", h(strings.Repeat("g", 64)), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256"},
		{"Base64OfSHA1Size", h(base64.StdEncoding.EncodeToString(sum[:20])), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256"},
		{"Base64MixedAlphabets", h(mixAlphabets(sum)), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256"},
		{"Base64NonZeroTrailingBits", h(nonCanonicalBase64(sum)), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256"},
		{"OtherPrefix", h("sha1=" + hexSig), body, time.Time{}, ingest.ErrSignature, "not an HMAC-SHA256"},
		{"TooLong", h(hexSig + strings.Repeat(" ", 8<<10)), body, time.Time{}, ingest.ErrSignature, "longer than 8192 bytes"},
	}, secret, hexSig, base64.StdEncoding.EncodeToString(sum))
}

// mixAlphabets returns the base64 of b with its first two characters
// replaced by one of the standard alphabet only (+) and one of the URL
// alphabet only (_), so that neither decodes it.
func mixAlphabets(b []byte) string {
	s := []byte(base64.StdEncoding.EncodeToString(b))
	s[0], s[1] = '+', '_'
	return string(s)
}

// nonCanonicalBase64 returns the padded base64 of b (32 bytes, so the last
// character carries 2 unused bits) with an unused bit set.
func nonCanonicalBase64(b []byte) string {
	s := []byte(base64.StdEncoding.EncodeToString(b))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(alphabet, s[42])
	s[42] = alphabet[i|1]
	return string(s)
}

// The vector of the Standard Webhooks reference libraries' signing tests
// (libraries/go/webhook_test.go TestWebhookSign and the other languages'
// equivalents, github.com/standard-webhooks/standard-webhooks), also the
// example of Svix's documentation.
const (
	standardDocSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardDocID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	standardDocTimestamp = "1614265330"
	standardDocPayload   = `{"test": 2432232314}`
	standardDocSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestVerifier_StandardPublishedVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(1614265330, 0)
	h := func(kv ...string) http.Header {
		base := map[string]string{"webhook-id": standardDocID, "webhook-timestamp": standardDocTimestamp, "webhook-signature": standardDocSignature}
		for i := 0; i+1 < len(kv); i += 2 {
			base[kv[i]] = kv[i+1]
		}
		out := http.Header{}
		for k, val := range base {
			out.Set(k, val)
		}
		return out
	}
	for _, secret := range []string{standardDocSecret, strings.TrimPrefix(standardDocSecret, "whsec_")} {
		v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(secret)})
		name := "Prefixed"
		if !strings.HasPrefix(secret, "whsec_") {
			name = "Unprefixed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runCases(t, v, []verifyCase{
				{"Valid", h(), []byte(standardDocPayload), at, nil, ""},
				{"WithOtherSignatures", h("webhook-signature", "v1a,aGVsbG8= v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+standardDocSignature), []byte(standardDocPayload), at, nil, ""},
				{"PayloadReencoded", h(), []byte(`{"test":2432232314}`), at, ingest.ErrSignature, "no webhook-signature v1 signature matched"},
				{"IDChanged", h("webhook-id", standardDocID+"x"), []byte(standardDocPayload), at, ingest.ErrSignature, "matched"},
				{"TimestampChanged", h("webhook-timestamp", "1614265331"), []byte(standardDocPayload), at, ingest.ErrSignature, "matched"},
				{"Later", h(), []byte(standardDocPayload), at.Add(301 * time.Second), ingest.ErrTimestamp, "timestamp 301s old, tolerance 5m0s"},
			}, standardDocSecret, standardDocSignature[3:])
		})
	}
}

func TestVerifier_Standard(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret)})
	key, key2 := standardKey(t, standardSecret), standardKey(t, standardSecret2)
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	now := testNow.Unix()
	ts := strconv.FormatInt(now, 10)
	sig := standardSig(key, id, ts, body)
	other := standardSig(key2, id, ts, body)
	changed := append([]byte(nil), body...)
	changed[len(changed)-1] = ' '
	h := func(id, ts, sig string) http.Header {
		out := http.Header{}
		for k, val := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
			if val != "" {
				out.Set(k, val)
			}
		}
		return out
	}
	at := func(t int64) http.Header {
		ts := strconv.FormatInt(t, 10)
		return h(id, ts, standardSig(key, id, ts, body))
	}

	runCases(t, v, []verifyCase{
		{"Valid", h(id, ts, sig), body, time.Time{}, nil, ""},
		{"HeaderNamesAnyCase", header("WEBHOOK-ID", id, "Webhook-Timestamp", ts, "webhook-SIGNATURE", sig), body, time.Time{}, nil, ""},
		{"RotationSecondEntry", h(id, ts, other+" "+sig), body, time.Time{}, nil, ""},
		{"RotationFirstEntry", h(id, ts, sig+" "+other), body, time.Time{}, nil, ""},
		{"OtherVersionsIgnored", h(id, ts, "v1a,"+sig[3:]+" v2,"+sig[3:]+" "+sig), body, time.Time{}, nil, ""},
		{"ExtraSpaces", h(id, ts, "  "+other+"   "+sig+" "), body, time.Time{}, nil, ""},
		{"SixteenSignatures", h(id, ts, strings.Repeat(other+" ", 15)+sig), body, time.Time{}, nil, ""},
		{"SvixHeaders", header("svix-id", id, "svix-timestamp", ts, "svix-signature", sig), body, time.Time{}, nil, ""},
		{"OldAtTolerance", at(now - 300), body, time.Time{}, nil, ""},
		{"FutureAtTolerance", at(now + 300), body, time.Time{}, nil, ""},

		{"BodyChanged", h(id, ts, sig), changed, time.Time{}, ingest.ErrSignature, "no webhook-signature v1 signature matched"},
		{"OtherSecret", h(id, ts, other), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"IDChanged", h("msg_other", ts, sig), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"TimestampChanged", h(id, strconv.FormatInt(now-1, 10), sig), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"SignatureNotBase64", h(id, ts, "v1,"+strings.Repeat("!", 44)), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"SignatureUnpadded", h(id, ts, strings.TrimRight(sig, "=")), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"SignatureHex", h(id, ts, "v1,"+hex.EncodeToString(mac(key, id, ".", ts, ".", string(body)))), body, time.Time{}, ingest.ErrSignature, "matched"},
		{"SignatureNoVersion", h(id, ts, sig[3:]), body, time.Time{}, ingest.ErrSignature, "no v1 signature"},
		{"OnlyV1a", h(id, ts, "v1a,"+sig[3:]), body, time.Time{}, ingest.ErrSignature, "no v1 signature"},
		{"SignatureVersionCase", h(id, ts, "V1,"+sig[3:]), body, time.Time{}, ingest.ErrSignature, "no v1 signature"},
		{"MissingID", h("", ts, sig), body, time.Time{}, ingest.ErrSignature, "no webhook-id header"},
		{"MissingSignature", h(id, ts, ""), body, time.Time{}, ingest.ErrSignature, "no webhook-signature header"},
		{"MissingAll", nil, body, time.Time{}, ingest.ErrSignature, "no webhook-id header"},
		{"IDWithFullStop", h("msg.1", ts, standardSig(key, "msg.1", ts, body)), body, time.Time{}, ingest.ErrSignature, "webhook-id header holds a full stop"},
		{"IDTooLong", h(strings.Repeat("i", 8<<10+1), ts, sig), body, time.Time{}, ingest.ErrSignature, "webhook-id header longer than 8192 bytes"},
		{"SignatureTooLong", h(id, ts, sig+strings.Repeat(" ", 8<<10)), body, time.Time{}, ingest.ErrSignature, "webhook-signature header longer than 8192 bytes"},
		{"SeventeenSignatures", h(id, ts, strings.Repeat(other+" ", 16)+sig), body, time.Time{}, ingest.ErrSignature, "more than 16 v1 signatures"},
		{"MixedFamilies", header("webhook-id", id, "svix-timestamp", ts, "svix-signature", sig), body, time.Time{}, ingest.ErrSignature, "no webhook-signature header"},
		{"SvixMissingSignature", header("svix-id", id, "svix-timestamp", ts), body, time.Time{}, ingest.ErrSignature, "no svix-signature header"},

		{"MissingTimestamp", h(id, "", sig), body, time.Time{}, ingest.ErrTimestamp, "no webhook-timestamp header"},
		{"TimestampNotInteger", h(id, "soon", sig), body, time.Time{}, ingest.ErrTimestamp, "webhook-timestamp header is not a unix time in seconds"},
		{"TimestampMilliseconds", at(now*1000 + 123), body, time.Time{}, ingest.ErrTimestamp, "in the future"},
		{"TimestampSigned", h(id, "+"+ts, sig), body, time.Time{}, ingest.ErrTimestamp, "not a unix time"},
		{"SvixTimestampNotInteger", header("svix-id", id, "svix-timestamp", "x", "svix-signature", sig), body, time.Time{}, ingest.ErrTimestamp, "svix-timestamp header is not a unix time"},
		{"Stale", at(now - 301), body, time.Time{}, ingest.ErrTimestamp, "timestamp 301s old, tolerance 5m0s"},
		{"Future", at(now + 301), body, time.Time{}, ingest.ErrTimestamp, "timestamp 301s in the future, tolerance 5m0s"},
	}, standardSecret, string(key), sig[3:], other[3:])
}

func TestVerifier_StandardRotation(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret, standardSecret2)})
	ts := strconv.FormatInt(testNow.Unix(), 10)
	for i, s := range []string{standardSecret, standardSecret2} {
		t.Run(strconv.Itoa(i+1), func(t *testing.T) {
			t.Parallel()
			h := header("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", standardSig(standardKey(t, s), "msg_1", ts, body))
			if err := v.Verify(h, body, testNow); err != nil {
				t.Fatalf("Verify with secret %d = %v", i+1, err)
			}
		})
	}
}

func TestVerifier_None(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeNone})
	runCases(t, v, []verifyCase{
		{"NoHeaders", nil, nil, time.Time{}, nil, ""},
		{"AnyBody", header("Stripe-Signature", "garbage"), body, time.Unix(0, 0), nil, ""},
		{"HugeHeader", header("X-Hub-Signature-256", strings.Repeat("x", 1<<20)), body, time.Time{}, nil, ""},
	})
}

func TestVerifier_NotBuilt(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]*ingest.Verifier{"Nil": nil, "Zero": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(header("X-Hub-Signature-256", githubDocSignature), []byte(githubDocPayload), testNow)
			if !errors.Is(err, ingest.ErrInvalidConfig) {
				t.Fatalf("Verify = %v, want ErrInvalidConfig", err)
			}
			if got := v.Scheme(); got != "" {
				t.Errorf("Scheme = %q, want empty", got)
			}
		})
	}
}

func TestNewVerifier_Valid(t *testing.T) {
	t.Parallel()
	cases := []ingest.VerifyConfig{
		{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret)},
		{Scheme: ingest.SchemeStripe, Secrets: secrets("not-whsec"), Tolerance: time.Hour},
		{Scheme: ingest.SchemeGitHub, Secrets: secrets(githubSecret, githubSecret2)},
		{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret, "c2VjcmV0"), Tolerance: time.Second},
		{Scheme: ingest.SchemeHMACSHA256, Secrets: secrets("s"), SignatureHeader: "X-Custom_Sig.1"},
		{Scheme: ingest.SchemeNone},
	}
	for _, cfg := range cases {
		t.Run(cfg.Scheme, func(t *testing.T) {
			t.Parallel()
			v := newVerifier(t, cfg)
			if got := v.Scheme(); got != cfg.Scheme {
				t.Errorf("Scheme = %q, want %q", got, cfg.Scheme)
			}
		})
	}
}

func TestNewVerifier_CopiesSecrets(t *testing.T) {
	t.Parallel()
	secret := []byte(githubDocSecret)
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: [][]byte{secret}})
	for i := range secret {
		secret[i] = 'x'
	}
	if err := v.Verify(header("X-Hub-Signature-256", githubDocSignature), []byte(githubDocPayload), testNow); err != nil {
		t.Fatalf("Verify after the caller changed its secret = %v", err)
	}
}

func TestNewVerifier_Errors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		cfg    ingest.VerifyConfig
		reason string
	}{
		{"NoScheme", ingest.VerifyConfig{Secrets: secrets("s")}, "no verify scheme (want stripe, github, standard, hmac-sha256 or none)"},
		{"UnknownScheme", ingest.VerifyConfig{Scheme: "svix", Secrets: secrets("s")}, `unknown verify scheme "svix"`},
		{"SchemeCase", ingest.VerifyConfig{Scheme: "Stripe", Secrets: secrets("s")}, `unknown verify scheme "Stripe"`},
		{"NoSecrets", ingest.VerifyConfig{Scheme: ingest.SchemeStripe}, "verify scheme stripe needs at least one secret"},
		{"EmptySecretList", ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: [][]byte{}}, "github needs at least one secret"},
		{"EmptySecret", ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets("a", "")}, "secret 2: empty"},
		{"NilSecret", ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: [][]byte{nil}}, "secret 1: empty"},
		{"NoneWithSecrets", ingest.VerifyConfig{Scheme: ingest.SchemeNone, Secrets: secrets("s")}, "none takes no secrets"},
		{"StandardNotBase64", ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret, "whsec_not base64!")}, "secret 2: not base64 after the whsec_ prefix"},
		{"StandardUnpadded", ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets("whsec_c2VjcmV0MQ")}, "secret 1: not base64"},
		{"StandardOnlyPrefix", ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets("whsec_")}, "secret 1: empty after the whsec_ prefix"},
		{"HMACNoHeader", ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, Secrets: secrets("s")}, "hmac-sha256 needs a signature header"},
		{"HMACBadHeader", ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, Secrets: secrets("s"), SignatureHeader: "X Sig:"}, `signature header "X Sig:" is not a valid header name`},
		{"HeaderForOtherScheme", ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets("s"), SignatureHeader: "X-Sig"}, "signature header is for verify scheme hmac-sha256 only, not github"},
		{"NegativeTolerance", ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets("s"), Tolerance: -time.Second}, "tolerance -1s is negative"},
		{"SubSecondTolerance", ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets("c2VjcmV0"), Tolerance: time.Millisecond}, "tolerance 1ms is under a second"},
		{"ToleranceWithoutTimestamp", ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets("s"), Tolerance: time.Minute}, "github signs no timestamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err := ingest.NewVerifier(c.cfg)
			if !errors.Is(err, ingest.ErrInvalidConfig) {
				t.Fatalf("NewVerifier = %v, %v; want ErrInvalidConfig", v, err)
			}
			if v != nil {
				t.Errorf("NewVerifier returned a Verifier with its error")
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("NewVerifier = %q, want it to say %q", err, c.reason)
			}
			for _, s := range c.cfg.Secrets {
				if len(s) > len("whsec_") && strings.Contains(err.Error(), string(s)) { // shorter ones are in the texts
					t.Errorf("NewVerifier = %q, holds a secret", err)
				}
			}
		})
	}
}

func TestVerifier_Concurrent(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret, stripeSecret2)})
	now := testNow.Unix()
	good := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig(stripeSecret2, now, body)))
	bad := header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeSig("whsec_x", now, body)))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if err := v.Verify(good, body, testNow); err != nil {
					errs <- fmt.Errorf("goroutine %d: valid request: %w", i, err)
					return
				}
				if err := v.Verify(bad, body, testNow); !errors.Is(err, ingest.ErrSignature) {
					errs <- fmt.Errorf("goroutine %d: forged request: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
