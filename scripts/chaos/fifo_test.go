package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

func TestOrderViolations(t *testing.T) {
	// Messages the campaign sent, by id: their place among their group's
	// sends. "r1" and "r2" are copies sent by replay.
	order := map[string]int{"m1": 1, "m2": 2, "m3": 3, "m4": 4}
	sendOrder := func(id string) (int, bool) { n, ok := order[id]; return n, ok }
	eff := func(seq int64, group, msg string, sentAt int64) event.Execution {
		return event.Execution{Seq: seq, Group: group, Key: msg, MessageID: msg, SentAt: sentAt, Effect: true}
	}
	for _, tc := range []struct {
		name    string
		effects []event.Execution
		want    int
	}{
		{"in order", []event.Execution{eff(1, "g", "m1", 100), eff(2, "g", "m2", 100), eff(3, "g", "m3", 101)}, 0},
		{"log order does not matter, apply order does", []event.Execution{eff(3, "g", "m3", 101), eff(1, "g", "m1", 100), eff(2, "g", "m2", 100)}, 0},
		{"a later message first", []event.Execution{eff(1, "g", "m2", 101), eff(2, "g", "m1", 100)}, 1},
		{"same millisecond, sent later, applied first", []event.Execution{eff(1, "g", "m2", 100), eff(2, "g", "m1", 100)}, 1},
		{"groups are apart", []event.Execution{eff(1, "g", "m2", 101), eff(2, "h", "m1", 100)}, 0},
		{"a replayed copy enters at the end", []event.Execution{eff(1, "g", "m1", 100), eff(2, "g", "m2", 101), eff(3, "g", "r1", 500), eff(4, "g", "m3", 600)}, 0},
		{"replayed copies in one millisecond are not ordered", []event.Execution{eff(1, "g", "r2", 500), eff(2, "g", "r1", 500)}, 0},
		{"a message sent before a replayed copy, applied after it", []event.Execution{eff(1, "g", "r1", 500), eff(2, "g", "m4", 400)}, 1},
		{"every step back counts", []event.Execution{eff(1, "g", "m3", 300), eff(2, "g", "m1", 100), eff(3, "g", "m4", 400), eff(4, "g", "m2", 200)}, 2},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			checked, got := orderViolations(tc.effects, sendOrder)
			if checked != len(tc.effects) || len(got) != tc.want {
				t.Fatalf("checked %d of %d, violations %d, want %d: %q", checked, len(tc.effects), len(got), tc.want, got)
			}
		})
	}
}

func TestAccount(t *testing.T) {
	o := &fifoOp{id: "f-1", class: fifoConflictLate, bodies: []string{`{"id":"f-1","variant":"a"}`, `{"id":"f-1","variant":"b"}`}}
	a, b := &fifoSend{tag: "s-1", op: o}, &fifoSend{tag: "s-2", op: o, variant: 1}
	keyless := &fifoSend{tag: "s-3", op: &fifoOp{id: "f-2", class: fifoKeyless, bodies: []string{"not json"}}}
	for _, tc := range []struct {
		name           string
		s              *fifoSend
		state, applied string
		inQueue, inDLQ bool
		dropped        bool
		want           string
	}{
		{"its payload applied", a, "complete", hash8(o.bodies[0]), false, false, false, whereDone},
		{"applied, and a copy in the dead-letter queue", a, "complete", hash8(o.bodies[0]), false, true, false, whereDone},
		{"applied but the key not complete", a, "failed", hash8(o.bodies[0]), false, false, false, whereLost},
		{"the conflicting payload of a completed key", b, "complete", hash8(o.bodies[0]), false, false, false, whereLost},
		{"the conflicting payload, dead-lettered", b, "complete", hash8(o.bodies[0]), false, true, false, whereDLQ},
		{"still in the queue", b, "failed", "", true, true, false, whereQueue},
		{"dropped at the send", b, "complete", hash8(o.bodies[0]), false, false, true, whereDropped},
		{"keyless, dead-lettered", keyless, "", "", false, true, false, whereDLQ},
		{"keyless, gone", keyless, "", "", false, false, false, whereLost},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			s := *tc.s
			s.dropped = tc.dropped
			if got := account(&s, tc.state, tc.applied, tc.inQueue, tc.inDLQ); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFIFOWorkload checks the shapes the FIFO campaign relies on.
func TestFIFOWorkload(t *testing.T) {
	w := newFIFOWorkload(rand.New(rand.NewPCG(1, 3)), 2000, 8)
	counts := map[fifoClass]int{}
	for _, o := range w.ops {
		counts[o.class]++
	}
	for cl := range fifoClasses {
		if counts[cl] == 0 {
			t.Errorf("no operation of class %s", cl)
		}
	}
	seen := map[string]bool{}
	for i, s := range w.main {
		if seen[s.tag] {
			t.Fatalf("tag %s twice", s.tag)
		}
		seen[s.tag] = true
		if s.variant == 1 {
			if s.op.class != fifoConflictEarly {
				t.Fatalf("%s: payload b in the main part of a %s operation", s.tag, s.op.class)
			}
			if prev := w.main[i-1]; prev.op != s.op || prev.variant != 0 {
				t.Fatalf("%s: payload b of %s not right behind its payload a", s.tag, s.op.id)
			}
		}
	}
	for _, s := range w.late {
		if s.op.class != fifoConflictLate || s.variant == 0 || !s.late || seen[s.tag] {
			t.Fatalf("late send %s: %s payload %d", s.tag, s.op.class, s.variant)
		}
	}
	if len(w.tags) != len(w.main)+len(w.late) {
		t.Fatalf("%d tags for %d sends", len(w.tags), len(w.main)+len(w.late))
	}
}
