package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// FuzzSourceKey: whatever the headers and the body hold, finding the key
// never panics, and a key found is usable text (valid UTF-8, no control
// characters) made of the source's prefix and the header's value, the
// signed id or the body's field as sent, or the hash of the body. A key
// taken from signed bytes does not change with the headers that no
// signature covers.
func FuzzSourceKey(f *testing.F) {
	f.Add("72d3162e-cc78-11e3-81ab-4c9367dc0958", "attacker-1", []byte(`{"id":"evt_1"}`))
	f.Add("", "", []byte(`{"id":12}`))
	f.Add("a\x00b", "msg_1", []byte(`{"id":"\u0000"}`))
	f.Add("\xff", "\u2028", []byte(`{"id":"\ud800"}`))
	f.Add(strings.Repeat("k", 2000), strings.Repeat("k", 600), []byte(`{"id":{"x":1}}`))
	f.Add("x", "y", []byte(`[`))
	prepare := func(s Source) *source {
		f.Helper()
		src, err := s.prepare()
		if err != nil {
			f.Fatal(err)
		}
		return src
	}
	none := VerifyConfig{Scheme: SchemeNone}
	bare := ""
	byHeader := prepare(Source{Name: "h", Path: "/h", QueueURL: "q", KeyHeader: "X-Event-Id", Verify: none})
	byPointer := prepare(Source{Name: "p", Path: "/p", QueueURL: "q", KeyPointer: "/id", KeyPrefix: &bare, Verify: none})
	hashed := prepare(Source{Name: "x", Path: "/x", QueueURL: "q", KeyPointer: "/id", HashMissing: true, Verify: none})
	github := prepare(Source{Name: "g", Path: "/g", QueueURL: "q", Verify: VerifyConfig{Scheme: SchemeGitHub, Secrets: [][]byte{[]byte("s")}}})
	standard := prepare(Source{Name: "s", Path: "/s", QueueURL: "q", Verify: VerifyConfig{Scheme: SchemeStandard, Secrets: [][]byte{[]byte("whsec_c2VjcmV0")}}})
	usable := func(t *testing.T, key string) {
		if key == "" || !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl) {
			t.Fatalf("key %q is not usable text", key)
		}
	}
	f.Fuzz(func(t *testing.T, id, signed string, body []byte) {
		h := http.Header{}
		h.Set("X-Event-Id", id)
		h.Set("X-GitHub-Delivery", id)
		h.Set("Webhook-Id", id)
		if key, err := byHeader.key(h, body, signed); err == nil {
			usable(t, key)
			if key != "h:"+h.Get("X-Event-Id") {
				t.Fatalf("key %q from header %q", key, h.Get("X-Event-Id"))
			}
		}
		if key, err := byPointer.key(h, body, signed); err == nil {
			usable(t, key)
			if !strings.Contains(string(body), key) && !strings.Contains(string(body), `\u`) && !strings.Contains(string(body), `\`) {
				t.Fatalf("key %q is not in the body %q", key, body)
			}
		}
		key, err := hashed.key(h, body, signed)
		if err != nil {
			t.Fatalf("with the hash, no key: %v", err)
		}
		usable(t, key)
		if !strings.HasPrefix(key, "x:") {
			t.Fatalf("key %q without the source's prefix", key)
		}

		sum := sha256.Sum256(body)
		want := "g:sha256:" + hex.EncodeToString(sum[:])
		key, err = github.key(h, body, "")
		if err != nil || key != want {
			t.Fatalf("github key %q, %v; want %q", key, err, want)
		}
		if key, err := github.key(http.Header{"X-Github-Delivery": {"other"}}, body, ""); err != nil || key != want {
			t.Fatalf("github key %q, %v with another delivery id; want %q", key, err, want)
		}

		if key, err := standard.key(h, body, signed); err == nil {
			usable(t, key)
			if key != "s:"+signed {
				t.Fatalf("standard key %q, want the signed id %q", key, signed)
			}
		} else if signed != "" && utf8.ValidString(signed) && !strings.ContainsFunc(signed, unicode.IsControl) && len(signed) < 500 {
			t.Fatalf("standard: no key from the signed id %q: %v", signed, err)
		}
	})
}

// FuzzSignedID: the id a Standard Webhooks request is keyed by is one its
// signature covers, whatever the request holds beside it: both header
// families at once, with ids that differ, and signatures for either.
func FuzzSignedID(f *testing.F) {
	secret := []byte("a standard secret")
	v, err := NewVerifier(VerifyConfig{Scheme: SchemeStandard, Secrets: [][]byte{[]byte("whsec_" + base64.StdEncoding.EncodeToString(secret))}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := func(id string, body []byte) string {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	// signWebhook, signSvix: which family's id the signature is for (0:
	// none, 1: webhook-id, 2: svix-id), put in that family's header.
	f.Add("msg_1", "msg_2", uint8(1), uint8(0), true, true, []byte(`{"a":1}`))
	f.Add("msg_1", "msg_2", uint8(2), uint8(2), false, true, []byte(`{}`))
	f.Add("", "msg_2", uint8(0), uint8(2), true, true, []byte(`{}`))
	f.Add("msg_1", "", uint8(2), uint8(1), true, false, []byte{})
	f.Fuzz(func(t *testing.T, webhookID, svixID string, signWebhook, signSvix uint8, webhookTS, svixTS bool, body []byte) {
		ids := []string{"", webhookID, svixID}
		h := http.Header{}
		set := func(name, value string) {
			if value != "" {
				h.Set(name, value)
			}
		}
		set("webhook-id", webhookID)
		set("svix-id", svixID)
		if webhookTS {
			set("webhook-timestamp", ts)
		}
		if svixTS {
			set("svix-timestamp", ts)
		}
		if i := signWebhook % 3; i > 0 {
			set("webhook-signature", sig(ids[i], body))
		}
		if i := signSvix % 3; i > 0 {
			set("svix-signature", sig(ids[i], body))
		}
		id, err := v.verify(h, body, now)
		if err != nil {
			if id != "" {
				t.Fatalf("verify failed (%v) and returned the id %q", err, id)
			}
			return
		}
		if id == "" || (id != webhookID && id != svixID) {
			t.Fatalf("signed id %q is neither header's (%q, %q)", id, webhookID, svixID)
		}
		if !strings.Contains(h.Get("webhook-signature")+" "+h.Get("svix-signature"), sig(id, body)) {
			t.Fatalf("signed id %q: no signature of it in %v", id, h)
		}
	})
}
