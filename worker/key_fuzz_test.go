package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// The fuzz targets of this file run their seeds as ordinary tests. Run one
// of them with, for example,
//
//	go test -run '^$' -fuzz '^FuzzKeyFromBody$' -fuzztime 60s ./worker/
//
// More seeds are in testdata/fuzz/<target>/.

// fuzzLeakLen is the body length from which an error must not quote the
// body: bodies may hold personal data and errors end up in logs.
const fuzzLeakLen = 64

// fuzzMaxTokens is the most reference tokens FuzzKeyFromBody tries in a
// pointer.
const fuzzMaxTokens = 64

// fuzzMaxPrefix is the longest prefix the fuzz targets try: the longest
// key.prefix the configuration accepts. newKeyer does not bound the prefix,
// but with HashMissing a prefix over MaxKeyLen-71 bytes makes hashed keys
// longer than MaxKeyLen.
const fuzzMaxPrefix = 128

// fuzzJSONString returns s as a JSON string literal. Unlike json.Marshal it
// keeps invalid UTF-8 as it is, so that the decoder sees those bytes.
func fuzzJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteString(hex.EncodeToString([]byte{c}))
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// fuzzSNS wraps message in an SNS notification envelope.
func fuzzSNS(message string) []byte {
	return []byte(`{"Type":"Notification","MessageId":"5a8e0bd4-1c1a-4b4f-9d35-6c2bd1b7a3f0",` +
		`"TopicArn":"arn:aws:sns:us-east-1:123456789012:orders","Message":` + fuzzJSONString(message) + `}`)
}

// fuzzBodySeed is one named seed of FuzzKeyFromBody.
type fuzzBodySeed struct {
	name    string
	body    []byte
	pointer string
	sns     bool
	hash    bool
	prefix  string
}

// fuzzBodySeeds are the seeds of FuzzKeyFromBody too large for a corpus
// file, all but one also wrapped in an SNS envelope. The small ones are in
// testdata/fuzz/FuzzKeyFromBody/.
func fuzzBodySeeds() []fuzzBodySeed {
	mib := strings.Repeat("x", 1<<20)
	nested := func(depth int) string {
		return strings.Repeat(`{"a":`, depth) + `"bottom"` + strings.Repeat("}", depth)
	}
	const depth = 20000 // twice what encoding/json accepts
	deepObject := nested(depth)
	deepArray := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	deepPointer := strings.Repeat("/a", 64)
	longKey := strings.Repeat("k", 10<<10)
	seeds := []fuzzBodySeed{
		{name: "1MiB-body", body: []byte(`{"id":"evt_1","pad":"` + mib + `"}`), pointer: "/id"},
		{name: "1MiB-not-JSON", body: []byte(mib), pointer: "/id", hash: true},
		{name: "nested-20000-objects", body: []byte(deepObject), pointer: deepPointer},
		{name: "nested-20000-arrays", body: []byte(deepArray), pointer: "/0/0/0", hash: true},
		{name: "nested-10000-objects", body: []byte(nested(10000)), pointer: "/a/a/a"},
		{name: "key-10KiB", body: []byte(`{"id":"` + longKey + `"}`), pointer: "/id"},
		{name: "key-10KiB-hashed", body: []byte(`{"id":"` + longKey + `"}`), pointer: "/id", hash: true, prefix: "p:"},
		{name: "number-10KiB", body: []byte(`{"n":` + strings.Repeat("9", 10<<10) + `}`), pointer: "/n"},
		{name: "key-512-bytes", body: []byte(`{"id":"` + strings.Repeat("k", 508) + `"}`), pointer: "/id", prefix: "abcd"},
		{name: "key-513-bytes", body: []byte(`{"id":"` + strings.Repeat("k", 509) + `"}`), pointer: "/id", prefix: "abcd"},
		{name: "longest-prefix-hashed", body: []byte(`{}`), pointer: "/id", hash: true, prefix: strings.Repeat("p", fuzzMaxPrefix)},
	}
	for _, s := range seeds[:len(seeds):len(seeds)] {
		if s.name == "1MiB-not-JSON" {
			continue // the envelope is JSON; one large envelope is enough
		}
		s.name = "sns-" + s.name
		s.body = fuzzSNS(string(s.body))
		s.sns = true
		seeds = append(seeds, s)
	}
	return seeds
}

// fuzzFromConfig reports whether s occurs in text that comes from the key
// configuration and may appear in an error: the pointer, its tokens and
// the attribute name, quoted or not.
func fuzzFromConfig(s string, cfg KeyConfig) bool {
	texts := []string{cfg.Pointer, cfg.Attribute, strconv.Quote(cfg.Attribute), cfg.Prefix}
	tokens, _ := parsePointer(cfg.Pointer)
	for _, tok := range tokens {
		texts = append(texts, tok, strconv.Quote(tok))
	}
	for _, text := range texts {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// fuzzKeyText reports whether s is usable key text: valid UTF-8 without
// control characters.
func fuzzKeyText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// fuzzPayload is the payload derive fingerprints: the body, or the Message
// of its SNS envelope. ok is false for an SNS body that is not an envelope:
// derive then fingerprints an empty payload, so such bodies are not
// checked.
func fuzzPayload(cfg KeyConfig, body []byte) (payload []byte, ok bool) {
	if !cfg.SNS {
		return body, true
	}
	env, err := openSNS(body)
	return env.message, err == nil
}

// fuzzCheckDerived checks what derive made of body under cfg: a valid key
// under the prefix and a fingerprint of the payload, or an ErrNoKey that
// does not quote the body.
func fuzzCheckDerived(t *testing.T, cfg KeyConfig, body []byte, d derived, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrNoKey) {
			t.Fatalf("error %q does not wrap ErrNoKey", err)
		}
		if cfg.HashMissing {
			t.Fatalf("derive failed with HashMissing: %v", err)
		}
		if d.key != "" || d.fingerprint != nil || d.hashed {
			t.Fatalf("derive returned %+v with its error", d)
		}
		if msg := err.Error(); len(body) > fuzzLeakLen && strings.Contains(msg, string(body)) && !fuzzFromConfig(string(body), cfg) {
			t.Fatalf("error quotes the body of %d bytes: %.200q", len(body), msg)
		}
		return
	}
	if err := ledger.ValidateKey(d.key); err != nil {
		t.Fatalf("derived key of %d bytes is invalid: %v", len(d.key), err)
	}
	if len(d.key) > ledger.MaxKeyLen {
		t.Fatalf("derived key of %d bytes, over %d", len(d.key), ledger.MaxKeyLen)
	}
	if !fuzzKeyText(d.key) {
		t.Fatalf("derived key %q is not valid UTF-8 or has a control character", d.key)
	}
	if !strings.HasPrefix(d.key, cfg.Prefix) {
		t.Fatalf("derived key %q does not start with the prefix %q", d.key, cfg.Prefix)
	}
	if len(d.fingerprint) != sha256.Size {
		t.Fatalf("fingerprint of %d bytes", len(d.fingerprint))
	}
	if d.hashed {
		if !cfg.HashMissing {
			t.Fatalf("hashed key %q without HashMissing", d.key)
		}
		if want := cfg.Prefix + "sha256:" + hex.EncodeToString(d.fingerprint); d.key != want {
			t.Fatalf("hashed key %q, want %q", d.key, want)
		}
	} else if d.key == cfg.Prefix {
		t.Fatalf("derived key %q is the prefix alone", d.key)
	}
	if payload, ok := fuzzPayload(cfg, body); ok {
		if sum := sha256.Sum256(payload); !bytes.Equal(d.fingerprint, sum[:]) {
			t.Fatalf("fingerprint %x is not the sha256 of the payload (%x)", d.fingerprint, sum)
		}
	}
}

// fuzzSameDerived fails unless a and b are the same derivation.
func fuzzSameDerived(t *testing.T, what string, a derived, aerr error, b derived, berr error) {
	t.Helper()
	if (aerr == nil) != (berr == nil) || a.key != b.key || a.hashed != b.hashed || !bytes.Equal(a.fingerprint, b.fingerprint) {
		t.Fatalf("%s: derived %q (hashed %v, %x, %v), then %q (hashed %v, %x, %v)",
			what, a.key, a.hashed, a.fingerprint, aerr, b.key, b.hashed, b.fingerprint, berr)
	}
	if aerr != nil && aerr.Error() != berr.Error() {
		t.Fatalf("%s: error %q, then %q", what, aerr, berr)
	}
}

// FuzzKeyFromBody derives keys from arbitrary bodies under arbitrary body
// key configurations. derive must not panic; a key must be valid for the
// ledger, free of control characters, under the prefix and depend on the
// body alone; a failure must wrap ErrNoKey without quoting the body, and
// with HashMissing there is none.
func FuzzKeyFromBody(f *testing.F) {
	for _, s := range fuzzBodySeeds() {
		f.Add(s.body, s.pointer, s.sns, s.hash, s.prefix)
	}
	f.Fuzz(func(t *testing.T, body []byte, pointer string, sns, hash bool, prefix string) {
		// A pointer is configuration of a handful of tokens, and each token
		// costs a parse of what is left of the body: longer pointers only
		// slow the search down.
		if strings.Count(pointer, "/") > fuzzMaxTokens || len(prefix) > fuzzMaxPrefix {
			return
		}
		cfg := KeyConfig{From: KeyFromBody, Pointer: pointer, SNS: sns, HashMissing: hash, Prefix: prefix}
		k, err := newKeyer(cfg)
		if err != nil {
			return
		}
		orig := bytes.Clone(body)
		d, err := k.derive(body, nil, nil)
		if !bytes.Equal(body, orig) {
			t.Fatal("derive changed the body")
		}
		fuzzCheckDerived(t, cfg, body, d, err)

		d2, err2 := k.derive(bytes.Clone(body), nil, nil)
		fuzzSameDerived(t, "derived twice", d, err, d2, err2)

		// A producer's BodyKeyFunc agrees with the worker.
		keyOf, ferr := BodyKeyFunc(cfg)
		if ferr != nil {
			t.Fatalf("BodyKeyFunc refuses a configuration newKeyer accepts: %v", ferr)
		}
		if key, kerr := keyOf(body); key != d.key || (kerr == nil) != (err == nil) {
			t.Fatalf("BodyKeyFunc gives %q (%v), derive %q (%v)", key, kerr, d.key, err)
		}

		// HashMissing changes nothing but the failures.
		other := cfg
		other.HashMissing = !hash
		ok, kerr := newKeyer(other)
		if kerr != nil {
			t.Fatalf("newKeyer accepts %+v but not %+v: %v", cfg, other, kerr)
		}
		od, oerr := ok.derive(body, nil, nil)
		fuzzCheckDerived(t, other, body, od, oerr)
		hashed, plain, plainErr := d, od, oerr
		if !hash {
			hashed, plain, plainErr = od, d, err
		}
		if plainErr == nil {
			if hashed.hashed || hashed.key != plain.key || !bytes.Equal(hashed.fingerprint, plain.fingerprint) {
				t.Fatalf("HashMissing changed the key %q to %q", plain.key, hashed.key)
			}
		} else if !hashed.hashed {
			t.Fatalf("HashMissing gave the unhashed key %q where derive fails (%v)", hashed.key, plainErr)
		}
	})
}

// FuzzPointer parses arbitrary pointers. parsePointer must accept exactly
// the RFC 6901 pointers; escaping the tokens again must give the pointer
// back; and lookupPointer must find a value placed at the tokens.
func FuzzPointer(f *testing.F) {
	for _, p := range []string{
		"", "/", "//", "/id", "/a/b/c", "/a~1b/c~0d", "/~01", "/~10", "/~", "/a~", "/~2",
		"id", "~0", "/0", "/-", "/ü/🙂", "/\x00", "/\xff", "/a/" + strings.Repeat("~0~1", 1000),
		strings.Repeat("/a", 10000),
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		tokens, err := parsePointer(p)
		valid := p == "" || p[0] == '/'
		for i := 0; valid && i < len(p); i++ {
			valid = p[i] != '~' || (i+1 < len(p) && (p[i+1] == '0' || p[i+1] == '1'))
		}
		if err != nil {
			if valid {
				t.Fatalf("parsePointer(%q) refuses a valid pointer: %v", p, err)
			}
			if tokens != nil {
				t.Fatalf("parsePointer(%q) returned tokens %q with its error", p, tokens)
			}
			return
		}
		if !valid {
			t.Fatalf("parsePointer(%q) accepts an invalid pointer: %q", p, tokens)
		}
		if p == "" {
			if len(tokens) != 0 {
				t.Fatalf(`parsePointer("") = %q, want no tokens`, tokens)
			}
			return
		}
		escaped := make([]string, len(tokens))
		for i, tok := range tokens {
			escaped[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
		}
		if again := "/" + strings.Join(escaped, "/"); again != p {
			t.Fatalf("parsePointer(%q) = %q, which escapes to %q", p, tokens, again)
		}
		if strings.Count(p, "/") != len(tokens) {
			t.Fatalf("parsePointer(%q) = %d tokens, want %d", p, len(tokens), strings.Count(p, "/"))
		}

		// Place a value at the tokens, in nested objects, and look it up.
		// JSON cannot carry invalid UTF-8 in names, and the decoder limits
		// nesting.
		if len(tokens) > 100 {
			return
		}
		for _, tok := range tokens {
			if !utf8.ValidString(tok) {
				return
			}
		}
		var doc any = "found"
		for i := len(tokens) - 1; i >= 0; i-- {
			doc = map[string]any{tokens[i]: doc}
		}
		raw, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lookupPointer(raw, tokens, p)
		if err != nil || got != "found" {
			t.Fatalf("lookupPointer(%s, %q) = %q, %v; want found", raw, p, got, err)
		}
	})
}

// FuzzKeyFromAttribute derives keys from an arbitrary message attribute.
// The key is the prefix and the attribute's string value when that is
// usable key text and short enough, and there is no key otherwise.
func FuzzKeyFromAttribute(f *testing.F) {
	f.Add("OrderId", "ord_1", "String", "", false)
	f.Add("OrderId", "ord_1", "String", "orders:", true)
	f.Add("OrderId", "42", "Number", "", false)
	f.Add("OrderId", "", "String", "", true)
	f.Add("OrderId", "a\x00b", "String", "", false)
	f.Add("OrderId", "a\x00b", "String", "p:", true)
	f.Add("OrderId", "\xff\xfe", "String", "", false)
	f.Add("OrderId", "ok", "Binary", "\xc3", false)
	f.Add("OrderId", strings.Repeat("k", 10<<10), "String", "", false)
	f.Add("OrderId", strings.Repeat("k", 10<<10), "String", "p:", true)
	f.Add("Order\x00Id", "a\u0085b", "String.custom", "", false)
	f.Add("", "x", "String", "", false)
	f.Add("ü", "zahlung-ü-🙂", "String", "ü:", false)
	f.Fuzz(func(t *testing.T, name, value, dataType, prefix string, hash bool) {
		if len(prefix) > fuzzMaxPrefix {
			return
		}
		cfg := KeyConfig{From: KeyFromAttribute, Attribute: name, HashMissing: hash, Prefix: prefix}
		k, err := newKeyer(cfg)
		if err != nil {
			if name != "" && attributeName(name) == nil && fuzzKeyText(prefix) {
				t.Fatalf("newKeyer(%+v): %v", cfg, err)
			}
			return
		}
		body := []byte(`{"id":"from-the-body"}`)
		attrs := map[string]types.MessageAttributeValue{name: {DataType: &dataType, StringValue: &value}}
		d, err := k.derive(body, attrs, nil)
		fuzzCheckDerived(t, cfg, body, d, err)
		want := prefix + value
		if value != "" && fuzzKeyText(value) && len(want) <= ledger.MaxKeyLen {
			if err != nil || d.key != want || d.hashed {
				t.Fatalf("attribute %q = %q: derived %q (hashed %v), %v; want %q", name, value, d.key, d.hashed, err, want)
			}
		} else if err == nil && !d.hashed {
			t.Fatalf("attribute %q = %q: derived the key %q", name, value, d.key)
		}
		d2, err2 := k.derive(body, map[string]types.MessageAttributeValue{name: {DataType: &dataType, StringValue: &value}}, nil)
		fuzzSameDerived(t, "derived twice", d, err, d2, err2)

		// Without a string value under the name there is no key.
		for _, attrs := range []map[string]types.MessageAttributeValue{
			nil,
			{name + "_": {DataType: &dataType, StringValue: &value}},
			{name: {DataType: &dataType, BinaryValue: []byte(value)}},
		} {
			d, err := k.derive(body, attrs, nil)
			fuzzCheckDerived(t, cfg, body, d, err)
			if err == nil && !d.hashed {
				t.Fatalf("derived the key %q from attributes %v", d.key, attrs)
			}
		}
	})
}

// FuzzDeduplicationID maps arbitrary keys to FIFO deduplication ids: 1 to
// 128 characters of ASCII letters, digits and punctuation, the key itself
// when it already is one, and a function of the key alone. It also derives
// keys from the MessageDeduplicationId system attribute.
func FuzzDeduplicationID(f *testing.F) {
	for _, key := range []string{
		"evt_1", "evt_1:a/b", "", " ", "has space", "tab\there", "a\x00b", "\x7f", "~", "!",
		"ü", "\xff", strings.Repeat("k", 128), strings.Repeat("k", 129), strings.Repeat("k", 10<<10),
		"sha256-" + strings.Repeat("0", 64),
	} {
		f.Add(key)
	}
	f.Fuzz(func(t *testing.T, key string) {
		id := DeduplicationID(key)
		if len(id) < 1 || len(id) > 128 {
			t.Fatalf("DeduplicationID(%q) = %q: %d characters", key, id, len(id))
		}
		for i := 0; i < len(id); i++ {
			if id[i] < 0x21 || id[i] > 0x7e {
				t.Fatalf("DeduplicationID(%q) = %q: byte %#x at %d", key, id, id[i], i)
			}
		}
		if again := DeduplicationID(strings.Clone(key)); again != id {
			t.Fatalf("DeduplicationID(%q) = %q, then %q", key, id, again)
		}
		valid := len(key) >= 1 && len(key) <= 128
		for i := 0; valid && i < len(key); i++ {
			valid = key[i] >= 0x21 && key[i] <= 0x7e
		}
		if valid && id != key {
			t.Fatalf("DeduplicationID(%q) = %q, want the key itself", key, id)
		}
		if !valid {
			sum := sha256.Sum256([]byte(key))
			if want := "sha256-" + hex.EncodeToString(sum[:]); id != want {
				t.Fatalf("DeduplicationID(%q) = %q, want %q", key, id, want)
			}
		}
		if again := DeduplicationID(id); again != id {
			t.Fatalf("DeduplicationID(%q) = %q, not itself", id, again)
		}

		// The key of a FIFO message is its MessageDeduplicationId.
		cfg := KeyConfig{From: KeyFromDeduplicationID}
		k, err := newKeyer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"id":"from-the-body"}`)
		system := map[string]string{string(types.MessageSystemAttributeNameMessageDeduplicationId): key}
		d, err := k.derive(body, nil, system)
		fuzzCheckDerived(t, cfg, body, d, err)
		if key != "" && fuzzKeyText(key) && len(key) <= ledger.MaxKeyLen {
			if err != nil || d.key != key {
				t.Fatalf("MessageDeduplicationId %q: derived %q, %v", key, d.key, err)
			}
		} else if err == nil {
			t.Fatalf("MessageDeduplicationId %q: derived the key %q", key, d.key)
		}
	})
}

// lookupPointerDecoded is lookupPointer as it was written first, by
// decoding each object on the way into a map[string]json.RawMessage and
// each array into a []json.RawMessage: FuzzLookupPointer holds the walk of
// lookupPointer to its answers.
func lookupPointerDecoded(doc []byte, tokens []string, pointer string) (string, error) {
	raw := json.RawMessage(bytes.TrimSpace(doc))
	if !json.Valid(raw) {
		return "", errors.New("body is not valid JSON")
	}
	for _, tok := range tokens {
		switch first(raw) {
		case '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil {
				return "", fmt.Errorf("pointer %s: %v", pointer, jsonProblem(err))
			}
			v, ok := obj[tok]
			if !ok {
				return "", fmt.Errorf("pointer %s: no field %q", pointer, tok)
			}
			raw = v
		case '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(raw, &arr); err != nil {
				return "", fmt.Errorf("pointer %s: %v", pointer, jsonProblem(err))
			}
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(arr) || (len(tok) > 1 && tok[0] == '0') {
				return "", fmt.Errorf("pointer %s: no array element %q", pointer, tok)
			}
			raw = arr[i]
		default:
			return "", fmt.Errorf("pointer %s: %q is inside %s", pointer, tok, kind(raw))
		}
	}
	switch c := first(raw); {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("pointer %s: %v", pointer, jsonProblem(err))
		}
		if s == "" {
			return "", fmt.Errorf("pointer %s: empty string", pointer)
		}
		if strings.ContainsRune(s, utf8.RuneError) && !writesReplacementChar(raw, s) {
			return "", fmt.Errorf("pointer %s: the id is not valid Unicode (invalid UTF-8 or a lone surrogate)", pointer)
		}
		return s, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return string(bytes.TrimSpace(raw)), nil
	default:
		return "", fmt.Errorf("pointer %s: value is %s, not a string or number", pointer, kind(raw))
	}
}

// FuzzLookupPointer looks arbitrary pointers up in arbitrary documents:
// lookupPointer, which walks the document, must answer what decoding it
// answers (lookupPointerDecoded), value and error alike.
func FuzzLookupPointer(f *testing.F) {
	for _, s := range []struct{ doc, pointer string }{
		{`{"id":"evt_1"}`, "/id"},
		{` {"id" : "evt_1" , "n":1} `, "/n"},
		{`{"id":"a","id":"b"}`, "/id"},
		{`{"id":"a","x":{"id":"c"},"id":"b"}`, "/x/id"},
		{`{"a\u0062":"escaped name"}`, "/ab"},
		{`{"a\/b":"slash"}`, "/a~1b"},
		{`{"~":"tilde"}`, "/~0"},
		{`{"\ud800":"lone surrogate name"}`, "/\ufffd"},
		{"{\"\xff\":\"invalid UTF-8 name\"}", "/\ufffd"},
		{`{"id":"\ud83d\ude00"}`, "/id"},
		{`{"id":"\ud800"}`, "/id"},
		{"{\"id\":\"\xff\"}", "/id"},
		{`{"id":"\ufffd"}`, "/id"},
		{`{"id":"�"}`, "/id"},
		{`{"id":"a\"b\\c\n"}`, "/id"},
		{`{"id":""}`, "/id"},
		{`{"id":-1.5e3}`, "/id"},
		{`{"id":true}`, "/id"},
		{`{"id":null}`, "/id"},
		{`{"id":[1,{"k":"v"},[2]]}`, "/id/1/k"},
		{`[["a","b"],["c"]]`, "/1/0"},
		{`[1,2,3]`, "/03"},
		{`[1,2,3]`, "/+1"},
		{`[1,2,3]`, "/-"},
		{`[1,2,3]`, "/3"},
		{`[]`, "/0"},
		{`{}`, "/id"},
		{`"top"`, ""},
		{`42`, ""},
		{`42`, "/a"},
		{`{"id":"x"} trailing`, "/id"},
		{`{"id":"x",}`, "/id"},
		{"\u00a0{\"id\":\"nbsp around\"}\u00a0", "/id"},
		{"\f{\"id\":\"form feed\"}", "/id"},
		{`{"":{"":"empty names"}}`, "//"},
		{`{"a":{"b":{"c":"deep"}},"a":{"b":"shallow"}}`, "/a/b/c"},
		{`{"s":"{\"id\":\"in a string\"}","id":"out"}`, "/id"},
		{`{"id":"a]b}c,d"}`, "/id"},
	} {
		f.Add([]byte(s.doc), s.pointer)
	}
	f.Fuzz(func(t *testing.T, doc []byte, pointer string) {
		tokens, err := parsePointer(pointer)
		if err != nil || len(tokens) > fuzzMaxTokens {
			return
		}
		got, gerr := lookupPointer(doc, tokens, pointer)
		want, werr := lookupPointerDecoded(doc, tokens, pointer)
		if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("lookupPointer(%q, %q) = %q, %v; decoding finds %q, %v", doc, pointer, got, gerr, want, werr)
		}
	})
}
