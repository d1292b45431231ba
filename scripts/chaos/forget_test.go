package main

import (
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// A conflicting payload that ran after the campaign forgot its key's
// record ran as an operator's forget allows (the next delivery runs,
// whatever its payload), and what ran before the record was gone may
// differ from the record made after; without the forget, neither holds.
func TestForgottenConflict(t *testing.T) {
	o := &op{id: "k", class: conflict, bodies: []string{`{"id":"k","v":"a"}`, `{"id":"k","v":"b"}`}}
	b := &msg{op: o, variant: 1}
	ms := func(n int64) time.Time { return time.Unix(0, n*int64(time.Millisecond)) }
	h := &history{e: &env{forgets: []forgetRec{{key: "k", from: ms(100), to: ms(120)}}},
		execs: map[string][]event.Execution{"k": {
			{T: ms(110).UnixNano(), BodyHash: event.Hash([]byte(o.bodies[0])), Status: 200}, // a, done as the forget ran
			{T: ms(200).UnixNano(), BodyHash: event.Hash([]byte(o.bodies[1])), Status: 200}, // b, the next delivery
		}}}
	if !h.forgotAfter("k", ms(110).UnixNano()) || h.forgotAfter("k", ms(200).UnixNano()) || h.forgotAfter("other", 0) {
		t.Fatal("forgotAfter: want true before the record was gone, false after it and for another key")
	}
	if !h.ranAfterForget(b) {
		t.Fatal("payload b, run to success after its key was forgotten, is not taken as run")
	}
	if !h.ranAfterForget(&msg{op: o, variant: 0}) {
		t.Fatal("payload a, done while the forget ran, is not taken as run after it began")
	}
	h.e.forgets = nil
	if h.ranAfterForget(b) || h.forgotAfter("k", 0) {
		t.Fatal("without a forget, a conflicting payload that ran is taken as allowed")
	}
}
