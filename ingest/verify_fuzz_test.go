package ingest_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ingest"
)

// The fuzz targets of this file run their seeds as ordinary tests. Run one
// of them with, for example,
//
//	go test -run '^$' -fuzz '^FuzzVerifyStripe$' -fuzztime 30s ./ingest/
//
// Each feeds Verify arbitrary header values and bodies with a fixed clock
// (testNow) and checks that it does not panic, that an error wraps exactly
// one of ErrSignature and ErrTimestamp and stays short and free of
// secrets, and that a request is accepted only when its header holds the
// signature the test computes for that body with one of its secrets: the
// fuzzer, not knowing the secrets, cannot forge one. The seeds hold such
// signatures so that the fuzzer mutates accepted requests too.

// fuzzMaxErrLen is the longest error text Verify may return: errors say
// what is wrong without quoting the request.
const fuzzMaxErrLen = 160

// checkFuzzErr fails t unless err is nil or wraps exactly one of
// ErrSignature and ErrTimestamp, is short and holds none of hide.
func checkFuzzErr(t *testing.T, err error, hide ...string) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ingest.ErrSignature) == errors.Is(err, ingest.ErrTimestamp) {
		t.Fatalf("Verify = %v, want it to wrap one of ErrSignature and ErrTimestamp", err)
	}
	msg := err.Error()
	if len(msg) > fuzzMaxErrLen {
		t.Fatalf("Verify's error is %d bytes long: %q", len(msg), msg)
	}
	for _, s := range hide {
		if strings.Contains(msg, s) {
			t.Fatalf("Verify = %q, holds a secret", msg)
		}
	}
}

// withinTolerance reports whether ts is decimal digits for a unix time at
// most DefaultTolerance from testNow.
func withinTolerance(ts string) bool {
	if ts == "" || strings.Trim(ts, "0123456789") != "" {
		return false
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := t - testNow.Unix()
	return -300 <= d && d <= 300
}

// digitRuns returns the maximal runs of decimal digits in s.
func digitRuns(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
}

func FuzzVerifyStripe(f *testing.F) {
	v := newVerifier(f, ingest.VerifyConfig{Scheme: ingest.SchemeStripe, Secrets: secrets(stripeSecret, stripeSecret2)})
	now := testNow.Unix()
	for _, b := range [][]byte{body, nil, []byte("{}"), []byte(`{"id":"evt_2","type":"charge.succeeded"}`)} {
		f.Add(fmt.Sprintf("t=%d,v1=%s", now, stripeSig(stripeSecret, now, b)), b)
		f.Add(fmt.Sprintf("t=%d,v1=%s,v1=%s,v0=%s", now-200, stripeSig(stripeSecret2, now-200, b), stripeSig(stripeSecret, now-200, b), stripeSig("x", now, b)), b)
		f.Add(fmt.Sprintf(" v1 = %s , t = %d ", strings.ToUpper(stripeSig(stripeSecret2, now+100, b)), now+100), b)
		f.Add(fmt.Sprintf("t=%d,v1=%s", now-301, stripeSig(stripeSecret, now-301, b)), b)
		f.Add(fmt.Sprintf("t=%d,v1=%s", now, stripeSig("whsec_unknown", now, b)), b)
	}
	f.Add("t=1700000000,v1=", []byte("x"))
	f.Add("t=abc,v1=00", []byte("x"))
	f.Add("t=1,t=2,v1=00", []byte{})
	f.Add(",,,=,t,v1,==", []byte{0xff})
	f.Add("t=1700000000"+strings.Repeat(",v1="+strings.Repeat("ab", 32), 17), body)
	f.Add(strings.Repeat("t", 9000), body)

	f.Fuzz(func(t *testing.T, value string, b []byte) {
		err := v.Verify(http.Header{"Stripe-Signature": {value}}, b, testNow)
		checkFuzzErr(t, err, stripeSecret, stripeSecret2)
		if err != nil {
			return
		}
		lower := strings.ToLower(value)
		for _, ts := range digitRuns(value) {
			if !withinTolerance(ts) {
				continue
			}
			for _, s := range []string{stripeSecret, stripeSecret2} {
				if strings.Contains(lower, hex.EncodeToString(mac([]byte(s), ts, ".", string(b)))) {
					return
				}
			}
		}
		t.Fatalf("Verify accepted Stripe-Signature %q for body %q: it holds no signature of the body at a timestamp within tolerance", value, b)
	})
}

func FuzzVerifyStandard(f *testing.F) {
	v := newVerifier(f, ingest.VerifyConfig{Scheme: ingest.SchemeStandard, Secrets: secrets(standardSecret, standardSecret2)})
	keys := [][]byte{standardKey(f, standardSecret), standardKey(f, standardSecret2)}
	now := strconv.FormatInt(testNow.Unix(), 10)
	old := strconv.FormatInt(testNow.Unix()-250, 10)
	for _, b := range [][]byte{body, nil, []byte(`{"test": 2432232314}`)} {
		f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", now, standardSig(keys[0], "msg_p5jXN8AQM9LWM0D4loKWxJek", now, b), b, false)
		f.Add("msg_1", old, "v1a,AAAA "+standardSig(keys[1], "msg_1", old, b)+" "+standardSig(keys[0], "msg_1", old, b), b, true)
		f.Add("msg_2", now, "v1,"+strings.Repeat("A", 43)+"= "+standardSig(keys[1], "msg_2", now, b), b, false)
		f.Add("msg_3", "1614265330", standardSig(keys[0], "msg_3", "1614265330", b), b, false)
		f.Add("msg_4", now, standardSig([]byte("unknown"), "msg_4", now, b), b, false)
	}
	f.Add("msg.1", now, standardSig(keys[0], "msg.1", now, body), body, false)
	f.Add("", "", "", []byte{}, false)
	f.Add("id", "x", "v1,", []byte("x"), true)
	f.Add("id", now, strings.Repeat("v1,AAAA ", 17), body, false)
	f.Add("id", now, "v2,abc v1a,abc ,,, v1", body, false)

	f.Fuzz(func(t *testing.T, id, ts, sig string, b []byte, svix bool) {
		prefix := "Webhook-"
		if svix {
			prefix = "Svix-"
		}
		h := http.Header{}
		for name, value := range map[string]string{"Id": id, "Timestamp": ts, "Signature": sig} {
			if value != "" {
				h[prefix+name] = []string{value}
			}
		}
		err := v.Verify(h, b, testNow)
		checkFuzzErr(t, err, standardSecret, standardSecret2, string(keys[0]), string(keys[1]))
		if err != nil {
			return
		}
		if strings.Contains(id, ".") || !withinTolerance(ts) {
			t.Fatalf("Verify accepted id %q, timestamp %q", id, ts)
		}
		for _, key := range keys {
			if strings.Contains(sig, standardSig(key, id, ts, b)) {
				return
			}
		}
		t.Fatalf("Verify accepted signature %q for id %q, timestamp %q, body %q: it holds no signature of them", sig, id, ts, b)
	})
}

func FuzzVerifyGitHub(f *testing.F) {
	v := newVerifier(f, ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: secrets(githubSecret, githubDocSecret)})
	for _, b := range [][]byte{body, nil, []byte(githubDocPayload)} {
		f.Add("sha256="+hex.EncodeToString(mac([]byte(githubSecret), string(b))), b, "")
		f.Add(" sha256="+strings.ToUpper(hex.EncodeToString(mac([]byte(githubDocSecret), string(b))))+" ", b, "sha1=00")
		f.Add("sha256="+hex.EncodeToString(mac([]byte("unknown"), string(b))), b, "")
	}
	f.Add("", body, "sha1="+strings.Repeat("0", 40))
	f.Add("sha256=", []byte("x"), "")
	f.Add("sha256="+strings.Repeat("zz", 32), []byte("x"), "")
	f.Add("sha1="+strings.Repeat("00", 20), []byte("x"), "")
	f.Add("sha256="+strings.Repeat("0", 9000), []byte("x"), "")

	f.Fuzz(func(t *testing.T, value string, b []byte, sha1 string) {
		h := http.Header{}
		if value != "" {
			h["X-Hub-Signature-256"] = []string{value}
		}
		if sha1 != "" {
			h["X-Hub-Signature"] = []string{sha1}
		}
		err := v.Verify(h, b, testNow)
		checkFuzzErr(t, err, githubSecret, githubDocSecret)
		if err != nil {
			return
		}
		lower := strings.ToLower(value)
		for _, s := range []string{githubSecret, githubDocSecret} {
			if strings.Contains(lower, "sha256="+hex.EncodeToString(mac([]byte(s), string(b)))) {
				return
			}
		}
		t.Fatalf("Verify accepted X-Hub-Signature-256 %q for body %q: it holds no signature of the body", value, b)
	})
}

func FuzzVerifyHMAC(f *testing.F) {
	const secret, secret2 = "hmac-fuzz-secret", "hmac-fuzz-secret-2"
	v := newVerifier(f, ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, Secrets: secrets(secret, secret2), SignatureHeader: "X-Signature"})
	for _, b := range [][]byte{body, nil, []byte("hello")} {
		sum, sum2 := mac([]byte(secret), string(b)), mac([]byte(secret2), string(b))
		f.Add(hex.EncodeToString(sum), b)
		f.Add("sha256="+strings.ToUpper(hex.EncodeToString(sum2)), b)
		f.Add(base64.StdEncoding.EncodeToString(sum), b)
		f.Add(" SHA256="+base64.RawURLEncoding.EncodeToString(sum2)+"\t", b)
		f.Add(base64.URLEncoding.EncodeToString(sum), b)
		f.Add(base64.RawStdEncoding.EncodeToString(sum2), b)
		f.Add(base64.StdEncoding.EncodeToString(mac([]byte("unknown"), string(b))), b)
	}
	f.Add("", []byte("x"))
	f.Add("sha256=", []byte("x"))
	f.Add(strings.Repeat("=", 44), []byte("x"))
	f.Add(strings.Repeat("g", 64), []byte("x"))
	f.Add(strings.Repeat("A", 9000), []byte("x"))

	f.Fuzz(func(t *testing.T, value string, b []byte) {
		h := http.Header{}
		if value != "" {
			h["X-Signature"] = []string{value}
		}
		err := v.Verify(h, b, time.Time{})
		checkFuzzErr(t, err, secret, secret2)
		if err != nil {
			return
		}
		lower := strings.ToLower(value)
		for _, s := range []string{secret, secret2} {
			sum := mac([]byte(s), string(b))
			// The unpadded encodings are prefixes of the padded ones.
			if strings.Contains(lower, hex.EncodeToString(sum)) ||
				strings.Contains(value, base64.RawStdEncoding.EncodeToString(sum)) ||
				strings.Contains(value, base64.RawURLEncoding.EncodeToString(sum)) {
				return
			}
		}
		t.Fatalf("Verify accepted X-Signature %q for body %q: it holds no signature of the body", value, b)
	})
}
