package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

func TestOrderViolations(t *testing.T) {
	// The campaign sent m1 and m2, then replay round 1 ran (at 1000 ms),
	// then it sent m3 and m4; round 2 ran at 2000 ms.
	t0 := time.UnixMilli(0)
	byTag := map[string]*fifoSend{}
	for i, at := range []int64{100, 200, 1100, 1200} {
		tag := fmt.Sprintf("m%d", i+1)
		byTag[tag] = &fifoSend{tag: tag, n: i + 1, sentAt: t0.Add(time.Duration(at) * time.Millisecond)}
	}
	rounds := []replayRound{{Round: 1, Start: time.UnixMilli(1000)}, {Round: 2, Start: time.UnixMilli(2000)}}
	place := func(e event.Execution) (fifoPlace, bool) { return placeOf(e, byTag, rounds) }
	// eff is an effect in group g of a delivery of send tag that entered
	// the queue at sentAt and was replayed replays times.
	eff := func(seq int64, group, tag string, sentAt int64, replays int) event.Execution {
		return event.Execution{Seq: seq, Group: group, Key: tag, Send: tag, SentAt: sentAt, Replays: replays, Effect: true}
	}
	for _, tc := range []struct {
		name    string
		effects []event.Execution
		want    int
	}{
		{"in order", []event.Execution{eff(1, "g", "m1", 100, 0), eff(2, "g", "m2", 200, 0), eff(3, "g", "m3", 1100, 0)}, 0},
		{"log order does not matter, apply order does", []event.Execution{eff(3, "g", "m3", 1100, 0), eff(1, "g", "m1", 100, 0), eff(2, "g", "m2", 200, 0)}, 0},
		{"a later message first", []event.Execution{eff(1, "g", "m2", 200, 0), eff(2, "g", "m1", 100, 0)}, 1},
		{"groups are apart", []event.Execution{eff(1, "g", "m2", 200, 0), eff(2, "h", "m1", 100, 0)}, 0},
		{"a replayed copy after what was sent before its round", []event.Execution{eff(1, "g", "m2", 200, 0), eff(2, "g", "m1", 1010, 1), eff(3, "g", "m3", 1100, 0)}, 0},
		{"a replayed copy before what was sent before its round", []event.Execution{eff(1, "g", "m1", 1010, 1), eff(2, "g", "m2", 200, 0)}, 1},
		{"a replayed copy after what was sent after its round", []event.Execution{eff(1, "g", "m3", 1100, 0), eff(2, "g", "m1", 1010, 1)}, 1},
		{"copies of one round are not ordered", []event.Execution{eff(1, "g", "m2", 1020, 1), eff(2, "g", "m1", 1030, 1)}, 0},
		{"copies of two rounds are", []event.Execution{eff(1, "g", "m1", 2010, 2), eff(2, "g", "m2", 1010, 1)}, 1},
		{"a copy the worker made keeps the place of the message it copies", []event.Execution{eff(1, "g", "m2", 200, 0), eff(2, "g", "m1", 900, 0)}, 1},
		{"every step back counts", []event.Execution{eff(1, "g", "m3", 1100, 0), eff(2, "g", "m1", 100, 0), eff(3, "g", "m4", 1200, 0), eff(4, "g", "m2", 200, 0)}, 2},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			checked, got, _ := orderViolations(tc.effects, place, nil)
			if checked != len(tc.effects) || len(got) != tc.want {
				t.Fatalf("checked %d of %d, violations %d, want %d: %q", checked, len(tc.effects), len(got), tc.want, got)
			}
		})
	}
	// An attempt of a run stopped while it was in flight is told apart.
	late := eff(2, "g", "m1", 100, 0)
	late.Run = 7
	_, got, frozen := orderViolations([]event.Execution{eff(1, "g", "m2", 200, 0), late}, place, func(e event.Execution) bool { return e.Run == 7 })
	if len(got) != 0 || len(frozen) != 1 {
		t.Fatalf("violations %q, frozen %q: want the one frozen", got, frozen)
	}
	if _, ok := place(eff(1, "g", "nobody", 100, 0)); ok {
		t.Fatal("placed a delivery of a send the campaign did not make")
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
		{"applied, completed, then its record forgotten", a, stateForgottenDone, hash8(o.bodies[0]), false, false, false, whereDone},
		{"applied, its record absent", a, "absent", hash8(o.bodies[0]), false, false, false, whereLost},
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

// A record the campaign forgot counts as done only when a worker had
// recorded the operation complete before the forget ended.
func TestCompletedThenForgotten(t *testing.T) {
	at := time.Unix(100, 0)
	c := &campaign{forgets: []forgetRec{{Key: "f-1", T: at.Add(-time.Second), End: at}}}
	for _, tc := range []struct {
		name     string
		key      string
		complete map[string][]int64
		want     bool
	}{
		{"completed before the forget ended", "f-1", map[string][]int64{"f-1": {at.Add(-500 * time.Millisecond).UnixNano()}}, true},
		{"completed only after it", "f-1", map[string][]int64{"f-1": {at.Add(time.Second).UnixNano()}}, false},
		{"never completed", "f-1", nil, false},
		{"not forgotten", "f-2", map[string][]int64{"f-2": {at.Add(-time.Minute).UnixNano()}}, false},
	} {
		if got := c.completedThenForgotten(tc.key, tc.complete); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFIFOWorkload checks the shapes the FIFO campaign relies on.
func TestFIFOWorkload(t *testing.T) {
	w := newFIFOWorkload(rand.New(rand.NewPCG(1, 3)), 2000, 8, 50)
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

	// Bursts: each leaves in one piece, with at least four operations of
	// one group among its sends, its first operation slow and another
	// behind it.
	if w.bursts < 40 {
		t.Fatalf("%d bursts, want about 50", w.bursts)
	}
	type burst struct {
		from, to int // its sends in main
		ops      []*fifoOp
	}
	bursts := map[int]*burst{}
	for i, s := range w.main {
		if s.burst == 0 {
			continue
		}
		b := bursts[s.burst]
		if b == nil {
			b = &burst{from: i}
			bursts[s.burst] = b
		}
		if b.to != 0 && b.to != i-1 {
			t.Fatalf("burst %d: its sends are not together (send %d after %d)", s.burst, i, b.to)
		}
		b.to = i
		if s.op.group == w.main[b.from].op.group && s.variant == 0 && !slices.Contains(b.ops, s.op) {
			b.ops = append(b.ops, s.op)
		}
	}
	if len(bursts) != w.bursts {
		t.Fatalf("%d bursts among the sends, %d made", len(bursts), w.bursts)
	}
	for n, b := range bursts {
		slow := 0
		for _, o := range b.ops {
			if o.class == fifoSlow {
				slow++
			}
		}
		if len(b.ops) < 4 || b.ops[0].class != fifoSlow || slow < 2 {
			t.Fatalf("burst %d: %d operations of its group, the first %s, %d slow; want at least 4, the first slow, 2 slow", n, len(b.ops), b.ops[0].class, slow)
		}
	}
}

// TestFIFOSender_Dropped: a send whose deduplication id an earlier send of
// the campaign got enqueued is dropped by SQS, and the sender says so
// whatever message id the server answers it with (fauxqs names the
// earlier message, moto a new one), also after the earlier message was
// deleted; a send with a deduplication id of its own is not.
func TestFIFOSender_Dropped(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})
	f := newFIFOSender(sqstest.Endpoint(t), q.URL, 1, 0)
	op := &fifoOp{id: "op-1", class: fifoNormal, group: "g", bodies: []string{`{"id":"op-1"}`}, byKey: true}
	other := &fifoOp{id: "op-2", class: fifoNormal, group: "g", bodies: []string{`{"id":"op-2"}`}, byKey: true}
	sends := []*fifoSend{{tag: "s-1", op: op}, {tag: "s-2", op: op}, {tag: "s-3", op: other}, {tag: "s-4", op: op}}
	send := func(s *fifoSend) {
		t.Helper()
		if err := f.send(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sends[:3] {
		send(s)
	}
	// Both enqueued messages received and deleted: SQS still remembers
	// their deduplication ids.
	for _, m := range sqstest.Drain(t, c, q.URL, 2, 5*time.Second) {
		if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	send(sends[3])
	for i, want := range []bool{false, true, false, true} {
		if got := sends[i].dropped; got != want {
			t.Errorf("%s (deduplication id %s): dropped %v, want %v", sends[i].tag, sends[i].dedup, got, want)
		}
	}
	if v, n := sqstest.Count(t, c, q.URL); v != 0 || n != 0 {
		t.Errorf("queue holds %d visible and %d in flight, want nothing: a send the sender took as dropped was enqueued", v, n)
	}
}
