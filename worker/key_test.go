package worker

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestKeyer_Derive(t *testing.T) {
	t.Parallel()
	sns := func(inner string) string {
		return `{"Type":"Notification","MessageId":"sns-1","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":` + quote(inner) + `}`
	}
	cases := []struct {
		name   string
		cfg    KeyConfig
		body   string
		attrs  map[string]types.MessageAttributeValue
		system map[string]string
		want   string // "" means ErrNoKey
		reason string // part of the error
	}{
		{"TopLevelString", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":"evt_1","x":1}`, nil, nil, "evt_1", ""},
		{"Nested", KeyConfig{From: KeyFromBody, Pointer: "/data/object/id"}, `{"data":{"object":{"id":"pi_9"}}}`, nil, nil, "pi_9", ""},
		{"Number", KeyConfig{From: KeyFromBody, Pointer: "/n"}, `{"n": 12345678901234567890}`, nil, nil, "12345678901234567890", ""},
		{"ArrayIndex", KeyConfig{From: KeyFromBody, Pointer: "/a/1"}, `{"a":["x","y"]}`, nil, nil, "y", ""},
		{"EscapedTokens", KeyConfig{From: KeyFromBody, Pointer: "/a~1b/c~0d"}, `{"a/b":{"c~d":"k"}}`, nil, nil, "k", ""},
		{"Prefix", KeyConfig{From: KeyFromBody, Pointer: "/id", Prefix: "stripe:"}, `{"id":"evt_1"}`, nil, nil, "stripe:evt_1", ""},
		{"Unicode", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":"zahlung-ü-🙂"}`, nil, nil, "zahlung-ü-🙂", ""},
		{"MissingField", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"other":1}`, nil, nil, "", `no field "id"`},
		{"NotJSON", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `id=1`, nil, nil, "", "not valid JSON"},
		{"Object", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":{"a":1}}`, nil, nil, "", "object, not a string or number"},
		{"Null", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":null}`, nil, nil, "", "null"},
		{"EmptyString", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":""}`, nil, nil, "", "empty string"},
		{"IndexOutOfRange", KeyConfig{From: KeyFromBody, Pointer: "/a/5"}, `{"a":[1]}`, nil, nil, "", "no array element"},
		{"LeadingZeroIndex", KeyConfig{From: KeyFromBody, Pointer: "/a/01"}, `{"a":[1,2]}`, nil, nil, "", "no array element"},
		{"ThroughScalar", KeyConfig{From: KeyFromBody, Pointer: "/a/b"}, `{"a":"s"}`, nil, nil, "", "inside a string"},
		{"ControlCharacter", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":"a\u0000b"}`, nil, nil, "", "control character"},
		{"TooLong", KeyConfig{From: KeyFromBody, Pointer: "/id"}, `{"id":"` + strings.Repeat("k", 10<<10) + `"}`, nil, nil, "", "longer than 512"},
		{"DeeplyNested", KeyConfig{From: KeyFromBody, Pointer: "/id"}, strings.Repeat("[", 20000) + strings.Repeat("]", 20000), nil, nil, "", "not valid JSON"},
		{"SNS", KeyConfig{From: KeyFromBody, Pointer: "/id", SNS: true}, sns(`{"id":"evt_sns"}`), nil, nil, "evt_sns", ""},
		{"SNSNotEnvelope", KeyConfig{From: KeyFromBody, Pointer: "/id", SNS: true}, `{"id":"evt_raw"}`, nil, nil, "", "not an SNS notification envelope"},
		{"SNSEnvelopeWithoutSNS", KeyConfig{From: KeyFromBody, Pointer: "/id"}, sns(`{"id":"evt_sns"}`), nil, nil, "", `no field "id"; the body is an SNS notification envelope: with key.sns = true`},
		{"Attribute", KeyConfig{From: KeyFromAttribute, Attribute: "EventId"}, `anything`,
			map[string]types.MessageAttributeValue{"EventId": {DataType: aws.String("String"), StringValue: aws.String("e-7")}}, nil, "e-7", ""},
		{"AttributeMissing", KeyConfig{From: KeyFromAttribute, Attribute: "EventId"}, `x`, nil, nil, "", `no attribute "EventId"`},
		{"AttributeBinary", KeyConfig{From: KeyFromAttribute, Attribute: "EventId"}, `x`,
			map[string]types.MessageAttributeValue{"EventId": {DataType: aws.String("Binary"), BinaryValue: []byte{1}}}, nil, "", "no string value"},
		{"DeduplicationID", KeyConfig{From: KeyFromDeduplicationID}, `x`, nil, map[string]string{"MessageDeduplicationId": "d-1"}, "d-1", ""},
		{"DeduplicationIDMissing", KeyConfig{From: KeyFromDeduplicationID}, `x`, nil, nil, "", "no MessageDeduplicationId"},
		{"DeduplicationIDOfACopy", KeyConfig{From: KeyFromDeduplicationID}, `x`,
			map[string]types.MessageAttributeValue{AttrDeduplicationID: {DataType: aws.String("String"), StringValue: aws.String("d-1")}},
			map[string]string{"MessageDeduplicationId": CopyDeduplicationID("m-9")}, "d-1", ""},
		{"DeduplicationIDOfACopyLost", KeyConfig{From: KeyFromDeduplicationID}, `x`, nil,
			map[string]string{"MessageDeduplicationId": CopyDeduplicationID("m-9")}, "", "without its original deduplication id"},
		{"DeduplicationIDAttributeIgnoredOnAnOriginal", KeyConfig{From: KeyFromDeduplicationID}, `x`,
			map[string]types.MessageAttributeValue{AttrDeduplicationID: {DataType: aws.String("String"), StringValue: aws.String("forged")}},
			map[string]string{"MessageDeduplicationId": "d-2"}, "d-2", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := newKeyer(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			d, err := k.derive([]byte(tc.body), tc.attrs, tc.system)
			if tc.want == "" {
				if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("derive: key %q, err %v; want ErrNoKey saying %q", d.key, err, tc.reason)
				}
				if len(tc.body) > 100 && strings.Contains(err.Error(), tc.body[:50]) {
					t.Fatalf("error quotes the body: %v", err)
				}
				return
			}
			if err != nil || d.key != tc.want || d.hashed {
				t.Fatalf("derive: key %q hashed=%v err %v, want %q", d.key, d.hashed, err, tc.want)
			}
			if len(d.fingerprint) != 32 {
				t.Fatalf("fingerprint of %d bytes", len(d.fingerprint))
			}
		})
	}
}

func TestKeyer_Stable(t *testing.T) {
	t.Parallel()
	k, err := newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/id", SNS: true})
	if err != nil {
		t.Fatal(err)
	}
	// Two SNS deliveries of one publish differ in their envelopes; the key
	// and the payload fingerprint come from the inner message only.
	a, err := k.derive([]byte(`{"Type":"Notification","MessageId":"1","Timestamp":"t1","Message":"{\"id\":\"e\"}"}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.derive([]byte(`{"Type":"Notification","MessageId":"2","Timestamp":"t2","Message":"{\"id\":\"e\"}"}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.key != b.key || string(a.fingerprint) != string(b.fingerprint) {
		t.Fatalf("two envelopes of one message: %+v vs %+v", a, b)
	}
	c, _ := k.derive([]byte(`{"Type":"Notification","Message":"{\"id\":\"e\",\"amount\":2}"}`), nil, nil)
	if c.key != a.key || string(c.fingerprint) == string(a.fingerprint) {
		t.Fatalf("a different payload under the same key must differ in fingerprint only")
	}
}

func TestKeyer_HashMissing(t *testing.T) {
	t.Parallel()
	k, err := newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/id", HashMissing: true, Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := k.derive([]byte(`not json at all`), nil, nil)
	if err != nil || !a.hashed || !strings.HasPrefix(a.key, "p:sha256:") {
		t.Fatalf("hashed key: %+v, %v", a, err)
	}
	b, _ := k.derive([]byte(`not json at all`), nil, nil)
	c, _ := k.derive([]byte(`not json at all!`), nil, nil)
	if a.key != b.key || a.key == c.key {
		t.Fatalf("hash keys must depend on the payload alone: %q %q %q", a.key, b.key, c.key)
	}
	d, _ := k.derive([]byte(`{"id":"natural"}`), nil, nil)
	if d.key != "p:natural" || d.hashed {
		t.Fatalf("a natural key is preferred: %+v", d)
	}
}

func TestNewKeyer_Invalid(t *testing.T) {
	t.Parallel()
	for _, cfg := range []KeyConfig{
		{From: "time"},
		{From: KeyFromBody, Pointer: ""},
		{From: KeyFromBody, Pointer: "id"},
		{From: KeyFromBody, Pointer: "/a~2"},
		{From: KeyFromAttribute},
		{From: KeyFromBody, Pointer: "/id", Prefix: "a\nb"},
	} {
		if _, err := newKeyer(cfg); err == nil {
			t.Errorf("newKeyer(%+v) accepted", cfg)
		}
	}
}

func TestDeduplicationID(t *testing.T) {
	t.Parallel()
	if got := DeduplicationID("evt_1:a/b"); got != "evt_1:a/b" {
		t.Fatalf("plain key changed: %q", got)
	}
	for _, key := range []string{"has space", "ü", strings.Repeat("k", 129)} {
		got := DeduplicationID(key)
		if !strings.HasPrefix(got, "sha256-") || len(got) > 128 || got != DeduplicationID(key) {
			t.Fatalf("DeduplicationID(%q) = %q", key, got)
		}
	}
}

func TestCopyDeduplicationID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"2f6b3c1e-9a3d-4c1a-8f57-1d2e3f4a5b6c", strings.Repeat("m", 200), "with space"} {
		got := CopyDeduplicationID(id)
		if !strings.HasPrefix(got, "sqsonce-copy-") || DeduplicationID(got) != got || got != CopyDeduplicationID(id) {
			t.Errorf("CopyDeduplicationID(%q) = %q", id, got)
		}
	}
	if CopyDeduplicationID("a") == CopyDeduplicationID("b") {
		t.Error("two messages, one deduplication id")
	}
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// Regression tests for inputs the fuzzers found.
func TestKeyer_FuzzFindings(t *testing.T) {
	t.Parallel()
	// An SNS keyer that falls back to hashing must hash the body it got,
	// not the empty payload of a failed unwrap: else every non-envelope
	// body shares one key and all but the first are dropped as duplicates.
	k, err := newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/id", SNS: true, HashMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := k.derive([]byte(`not an envelope`), nil, nil)
	b, _ := k.derive([]byte(`another body`), nil, nil)
	if a.key == b.key || string(a.fingerprint) == string(b.fingerprint) {
		t.Fatalf("two different bodies got key %q and %q", a.key, b.key)
	}

	// A prefix long enough to push a hashed key past the ledger's limit.
	if _, err := newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/id", Prefix: strings.Repeat("p", MaxPrefixLen+1)}); err == nil {
		t.Fatal("an over-long prefix was accepted")
	}

	// Ids that encoding/json would all repair to U+FFFD must not become
	// one key; an id that really is U+FFFD stays valid.
	k, _ = newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/id"})
	for _, body := range []string{`{"id":"\ud800"}`, `{"id":"a\udfffb"}`, "{\"id\":\"\xff\"}"} {
		if d, err := k.derive([]byte(body), nil, nil); !errors.Is(err, ErrNoKey) {
			t.Errorf("%q: key %q, err %v; want ErrNoKey", body, d.key, err)
		}
	}
	for _, body := range []string{`{"id":"\ufffd"}`, "{\"id\":\"x\uFFFD\"}", `{"id":"\ud83d\ude00"}`} {
		if _, err := k.derive([]byte(body), nil, nil); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// BenchmarkKeyer_Derive derives the key of a small body by a pointer, as
// the worker does for every message it receives.
func BenchmarkKeyer_Derive(b *testing.B) {
	k, err := newKeyer(KeyConfig{From: KeyFromBody, Pointer: "/data/id"})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"type":"order.created","sent":1700000000000,"data":{"id":"ord_4f3c2a1b","amount":1299,"currency":"eur","tags":["a","b"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.derive(body, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// An SNS envelope's MessageAttributes stand beside the message's own, which
// win on a name given in both; a Binary one is decoded, one that is not
// base64 is left out; keys may come from them.
func TestKeyer_SNSAttributes(t *testing.T) {
	t.Parallel()
	k, err := newKeyer(KeyConfig{From: KeyFromAttribute, Attribute: "EventId", SNS: true})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"Type":"Notification","Message":"{\"id\":1}","MessageAttributes":{
		"EventId":{"Type":"String","Value":"evt-9"},
		"Region":{"Type":"String","Value":"from-envelope"},
		"Count":{"Type":"Number","Value":"3"},
		"Blob":{"Type":"Binary","Value":"AAEC"},
		"Bad":{"Type":"Binary","Value":"not base64!"}}}`)
	own := map[string]types.MessageAttributeValue{"Region": {DataType: aws.String("String"), StringValue: aws.String("own")}}
	o := k.open(body, own)
	if o.err != nil || string(o.payload) != `{"id":1}` {
		t.Fatalf("open = %q, %v; want the inner message", o.payload, o.err)
	}
	if got := stringAttributes(o.attrs); !maps.Equal(got, map[string]string{"EventId": "evt-9", "Region": "own", "Count": "3"}) {
		t.Errorf("string attributes = %v", got)
	}
	if b := o.attrs["Blob"].BinaryValue; !bytes.Equal(b, []byte{0, 1, 2}) {
		t.Errorf("Blob = %v, want 00 01 02", b)
	}
	if _, ok := o.attrs["Bad"]; ok {
		t.Error("a Binary attribute that is not base64 was kept")
	}
	if len(own) != 1 {
		t.Errorf("the message's own attributes were changed: %v", own)
	}
	d, err := k.deriveOpened(o, nil)
	if err != nil || d.key != "evt-9" {
		t.Errorf("key = %q, %v; want evt-9 from the envelope's attribute", d.key, err)
	}
}
