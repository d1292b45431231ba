package ingest

import (
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzSourceKey: whatever the header and the body hold, finding the key
// never panics, and a key found is usable text (valid UTF-8, no control
// characters) that is the header's value or the body's field as sent, or,
// with the hash, the hash of the body.
func FuzzSourceKey(f *testing.F) {
	f.Add("72d3162e-cc78-11e3-81ab-4c9367dc0958", []byte(`{"id":"evt_1"}`))
	f.Add("", []byte(`{"id":12}`))
	f.Add("a\x00b", []byte(`{"id":"\u0000"}`))
	f.Add("\xff", []byte(`{"id":"\ud800"}`))
	f.Add(strings.Repeat("k", 2000), []byte(`{"id":{"x":1}}`))
	f.Add("x", []byte(`[`))
	byHeader, err := Source{Name: "h", Path: "/h", QueueURL: "q", KeyHeader: "X-Event-Id", Verify: VerifyConfig{Scheme: SchemeNone}}.prepare()
	if err != nil {
		f.Fatal(err)
	}
	byPointer, err := Source{Name: "p", Path: "/p", QueueURL: "q", KeyPointer: "/id", Verify: VerifyConfig{Scheme: SchemeNone}}.prepare()
	if err != nil {
		f.Fatal(err)
	}
	hashed, err := Source{Name: "x", Path: "/x", QueueURL: "q", KeyPointer: "/id", HashMissing: true, Verify: VerifyConfig{Scheme: SchemeNone}}.prepare()
	if err != nil {
		f.Fatal(err)
	}
	usable := func(t *testing.T, key string) {
		if key == "" || !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl) {
			t.Fatalf("key %q is not usable text", key)
		}
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		h := http.Header{}
		h.Set("X-Event-Id", id)
		if key, err := byHeader.key(h, body); err == nil {
			usable(t, key)
			if key != h.Get("X-Event-Id") {
				t.Fatalf("key %q from header %q", key, h.Get("X-Event-Id"))
			}
		}
		if key, err := byPointer.key(h, body); err == nil {
			usable(t, key)
			if !strings.Contains(string(body), key) && !strings.Contains(string(body), `\u`) && !strings.Contains(string(body), `\`) {
				t.Fatalf("key %q is not in the body %q", key, body)
			}
		}
		key, err := hashed.key(h, body)
		if err != nil {
			t.Fatalf("with the hash, no key: %v", err)
		}
		usable(t, key)
	})
}
