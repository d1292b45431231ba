package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStory_RoundTrip: a history and a payload read back as written, and a
// payload is cut to its bounds, attributes first in name order.
func TestStory_RoundTrip(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	h := []Attempt{
		{Start: t0, End: t0.Add(time.Second), Owner: "host/1/abc/7", Outcome: AttemptFailed, Error: "503 from bank"},
		{Start: t0.Add(2 * time.Second), End: t0.Add(3 * time.Second), Owner: "host/1/abc/9", Outcome: AttemptLapsed},
		{End: t0.Add(4 * time.Second), Owner: "x", Outcome: AttemptComplete},
	}
	got, ok := DecodeHistory(EncodeHistory(h))
	if !ok || fmt.Sprint(got) != fmt.Sprint(h) {
		t.Fatalf("history read back: %v (%v), want %v", got, ok, h)
	}
	if _, ok := DecodeHistory([]byte{1, 5}); ok {
		t.Fatal("a history cut short was read")
	}
	p := &Payload{Body: []byte("{\"id\":1}"), Attributes: map[string]string{"B": "2", "A": "1"}}
	if q := DecodePayload(EncodePayload(p)); q == nil || string(q.Body) != string(p.Body) || fmt.Sprint(q.Attributes) != fmt.Sprint(p.Attributes) || q.Cut {
		t.Fatalf("payload read back: %+v", q)
	}
	big := &Payload{Body: []byte(strings.Repeat("é", MaxPayload)), Attributes: map[string]string{"Big": strings.Repeat("v", MaxPayload), "A": "1"}}
	b := big.Bounded()
	if !b.Cut || b.Attributes["A"] != "1" || len(b.Attributes) != 1 || len(b.Body)+2 > MaxPayload || strings.ContainsRune(string(b.Body), '\uFFFD') {
		t.Fatalf("bounded: cut %v, attributes %d, body %d bytes", b.Cut, len(b.Attributes), len(b.Body))
	}
	if q := DecodePayload(EncodePayload(b)); q == nil || len(q.Body) != len(b.Body) || !q.Cut {
		t.Fatal("a bounded payload does not read back")
	}
	r := Record{Attempts: 0}
	EndAttempt(&r, time.Time{}, t0, AttemptComplete, "")
	if len(r.History) != 0 {
		t.Fatalf("a first attempt that completed is stored: %v", r.History)
	}
}
