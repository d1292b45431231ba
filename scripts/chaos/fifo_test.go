package main

import (
	"fmt"
	"math/rand/v2"
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
	byTag := map[string]*msg{}
	for i, at := range []int64{100, 200, 1100, 1200} {
		tag := fmt.Sprintf("m%d", i+1)
		byTag[tag] = &msg{tag: tag, n: i + 1, sentAt: time.UnixMilli(at)}
	}
	rounds := []replayRound{{round: 1, start: time.UnixMilli(1000)}, {round: 2, start: time.UnixMilli(2000)}}
	// The worker sent m1's delivery d1 to the dead-letter queue at 1500
	// ms and m2's d2 at 500 ms, and could delete neither.
	dead := map[string]time.Time{"d1": time.UnixMilli(1500), "d2": time.UnixMilli(500)}
	at := func(x event.Execution) (from, to place, ok bool) { return placeOf(x, byTag, rounds, dead) }
	// eff is an effect in group g of a delivery of send tag that entered
	// the queue at sentAt and was replayed replays times.
	eff := func(seq int64, group, tag string, sentAt int64, replays int) event.Execution {
		return event.Execution{Seq: seq, Group: group, Key: tag, Send: tag, SentAt: sentAt, Replays: replays, Effect: true}
	}
	// deadEff is an effect, at at ms, of delivery msgID of send tag, which
	// the worker had dead-lettered.
	deadEff := func(seq int64, group, tag, msgID string, at int64) event.Execution {
		x := eff(seq, group, tag, 0, 0)
		x.MessageID, x.T, x.SentAt = msgID, time.UnixMilli(at).UnixNano(), byTag[tag].sentAt.UnixMilli()
		return x
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
		{"a dead-lettered delivery that came back runs with the round that reset it", []event.Execution{eff(1, "g", "m3", 1100, 0), deadEff(2, "g", "m1", "d1", 2100)}, 0},
		{"but not before that round", []event.Execution{eff(1, "g", "m3", 1100, 0), deadEff(2, "g", "m1", "d1", 1800)}, 1},
		{"and before what was sent after that round", []event.Execution{deadEff(1, "g", "m2", "d2", 1050), eff(2, "g", "m3", 1100, 0)}, 0},
		{"not after it", []event.Execution{eff(1, "g", "m3", 1100, 0), deadEff(2, "g", "m2", "d2", 1150)}, 1},
		{"or where it was sent, the group behind it waiting", []event.Execution{deadEff(1, "g", "m1", "d1", 2100), eff(2, "g", "m2", 200, 0), eff(3, "g", "m3", 1100, 0)}, 0},
		{"and not before what was sent before it", []event.Execution{deadEff(1, "g", "m2", "d2", 1050), eff(2, "g", "m1", 100, 0)}, 1},
		{"every step back counts", []event.Execution{eff(1, "g", "m3", 1100, 0), eff(2, "g", "m1", 100, 0), eff(3, "g", "m4", 1200, 0), eff(4, "g", "m2", 200, 0)}, 2},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			checked, got, _ := orderViolations(tc.effects, at, nil)
			if checked != len(tc.effects) || len(got) != tc.want {
				t.Fatalf("checked %d of %d, violations %d, want %d: %q", checked, len(tc.effects), len(got), tc.want, got)
			}
		})
	}
	// An attempt of a run stopped while it was in flight is told apart.
	late := eff(2, "g", "m1", 100, 0)
	late.Run = 7
	_, got, frozen := orderViolations([]event.Execution{eff(1, "g", "m2", 200, 0), late}, at, func(x event.Execution) bool { return x.Run == 7 })
	if len(got) != 0 || len(frozen) != 1 {
		t.Fatalf("violations %q, frozen %q: want the one frozen", got, frozen)
	}
	if _, _, ok := at(eff(1, "g", "nobody", 100, 0)); ok {
		t.Fatal("placed a delivery of a send the campaign did not make")
	}
}

// TestFIFOLoad checks the shapes the FIFO campaigns rely on.
func TestFIFOLoad(t *testing.T) {
	w := fifoLoad(2000, 8, 50)(rand.New(rand.NewPCG(1, 3)))
	counts := map[class]int{}
	for _, o := range w.ops {
		counts[o.class]++
	}
	for c := range classes {
		if counts[c] == 0 && c != poison { // poison: the flow campaigns' own
			t.Errorf("no operation of class %s", c)
		}
	}
	seen := map[string]bool{}
	var main []*msg
	bursts := 0
	for _, u := range w.main {
		main = append(main, u.msgs...)
		if len(u.msgs) < 4 {
			continue
		}
		// A burst: at least four operations of its first one's group, the
		// first slow and another slow behind it.
		bursts++
		var ops []*op
		for _, m := range u.msgs {
			if m.groupID() == u.msgs[0].op.group && m.variant == 0 && (len(ops) == 0 || ops[len(ops)-1] != m.op) {
				ops = append(ops, m.op)
			}
		}
		slows := 0
		for _, o := range ops {
			if o.class == slow {
				slows++
			}
		}
		if len(ops) < 4 || ops[0].class != slow || slows < 2 {
			t.Fatalf("burst of %d messages: %d operations of its group, the first %s, %d slow; want at least 4, the first slow, 2 slow", len(u.msgs), len(ops), ops[0].class, slows)
		}
	}
	if bursts < 40 || bursts != w.bursts {
		t.Fatalf("%d bursts among the units, %d made; want about 50", bursts, w.bursts)
	}
	for i, m := range main {
		if seen[m.tag] {
			t.Fatalf("tag %s twice", m.tag)
		}
		seen[m.tag] = true
		if m.variant == 1 {
			if m.op.class != conflictEarly {
				t.Fatalf("%s: payload b in the main part of a %s operation", m.tag, m.op.class)
			}
			if prev := main[i-1]; prev.op != m.op || prev.variant != 0 {
				t.Fatalf("%s: payload b of %s not right behind its payload a", m.tag, m.op.id)
			}
		}
	}
	for _, m := range w.late {
		if m.op.class != conflict || m.variant == 0 || !m.late || seen[m.tag] {
			t.Fatalf("late send %s: %s payload %d", m.tag, m.op.class, m.variant)
		}
	}
	if w.tags != len(main)+len(w.late) {
		t.Fatalf("%d tags for %d sends", w.tags, len(main)+len(w.late))
	}
}

// TestSender_Dropped: a send whose deduplication id an earlier send got
// enqueued is dropped by SQS, and the sender says so whatever message id
// the server answers it with (fauxqs names the earlier message, moto a new
// one), also after the earlier message was deleted; a send with a
// deduplication id of its own is not.
func TestSender_Dropped(t *testing.T) {
	t.Parallel()
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{FIFO: true})
	s := newSender(sqstest.Endpoint(t), q.URL, true, 1, 0)
	o := &op{id: "op-1", class: normal, group: "g", bodies: []string{`{"id":"op-1"}`}, byKey: true}
	other := &op{id: "op-2", class: normal, group: "g", bodies: []string{`{"id":"op-2"}`}, byKey: true}
	msgs := []*msg{{tag: "s-1", op: o}, {tag: "s-2", op: o}, {tag: "s-3", op: other}, {tag: "s-4", op: o}}
	send := func(m *msg) {
		t.Helper()
		if err := s.send(t.Context(), unit{msgs: []*msg{m}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs[:3] {
		send(m)
	}
	// Both enqueued messages received and deleted: SQS still remembers
	// their deduplication ids.
	for _, m := range sqstest.Drain(t, c, q.URL, 2, 5*time.Second) {
		if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	send(msgs[3])
	for i, want := range []bool{false, true, false, true} {
		if got := msgs[i].dropped; got != want {
			t.Errorf("%s (deduplication id %s): dropped %v, want %v", msgs[i].tag, msgs[i].dedup, got, want)
		}
	}
	if v, n := sqstest.Count(t, c, q.URL); v != 0 || n != 0 {
		t.Errorf("queue holds %d visible and %d in flight, want nothing: a send the sender took as dropped was enqueued", v, n)
	}
}
