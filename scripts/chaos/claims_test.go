package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
	"github.com/sqsonce/sqsonce/worker"
)

// TestClaimHistory checks the audit's reading of who held a claim when:
// a handler called after another claim took the operation over, after its
// own claim was released, or after its record was forgotten and the
// ledger had told its worker, is counted; one called under its own claim,
// or after a forget its worker could not know of yet, is not.
func TestClaimHistory(t *testing.T) {
	ev := func(run int, kind, key, owner string, ms int64, takeover bool) runEvent {
		return runEvent{run, event.WorkerEvent{Ev: kind, Key: key, Owner: owner, T: ms * int64(time.Millisecond), Takeover: takeover}}
	}
	claim := func(run int, owner string, ms int64) runEvent { return ev(run, event.EvClaim, "k", owner, ms, false) }
	take := func(run int, owner string, ms int64) runEvent { return ev(run, event.EvClaim, "k", owner, ms, true) }
	start := func(run int, owner string, ms int64) runEvent { return ev(run, event.EvStart, "k", owner, ms, false) }
	lost := func(run int, owner string, ms int64) runEvent { return ev(run, event.EvLost, "k", owner, ms, false) }
	// sentAt is a claim whose call was sent at sent and answered at ms.
	sentAt := func(e runEvent, sent int64) runEvent { e.Since = sent * int64(time.Millisecond); return e }
	lease := workerVisibility.Milliseconds()
	for _, tc := range []struct {
		name      string
		events    []runEvent // in time order
		forgotten int64      // ms, 0: none
		lost      int
		unknowing int
		taken     int // claims taken over from a live run before it started them
	}{
		{"own claim", []runEvent{claim(1, "a", 10), start(1, "a", 20)}, 0, 0, 0, 0},
		{"started before the takeover", []runEvent{claim(1, "a", 10), start(1, "a", 20), take(2, "b", 30), start(2, "b", 31)}, 0, 0, 0, 0},
		{"started after the takeover", []runEvent{claim(1, "a", 10), take(2, "b", 30), start(1, "a", 40)}, 0, 1, 0, 1},
		{"taken over, never started there", []runEvent{claim(1, "a", 10), take(2, "b", 30), start(2, "b", 31), lost(1, "a", 35)}, 0, 0, 0, 1},
		{"another key's claim does not count", []runEvent{claim(1, "a", 10), ev(2, event.EvClaim, "j", "b", 30, false), start(1, "a", 40)}, 0, 0, 0, 0},
		{"started after its own release", []runEvent{claim(1, "a", 10), ev(1, event.EvRelease, "k", "a", 20, false), start(1, "a", 30)}, 0, 1, 0, 0},
		{"no claim written", []runEvent{start(1, "a", 30)}, 0, 1, 0, 0},
		{"forgotten, the worker told, then started", []runEvent{claim(1, "a", 10), lost(1, "a", 25), start(1, "a", 30)}, 20, 1, 0, 0},
		{"forgotten, started before the worker was told", []runEvent{claim(1, "a", 10), start(1, "a", 22), lost(1, "a", 25)}, 20, 0, 1, 0},
		{"forgotten before the claim", []runEvent{claim(1, "a", 10), start(1, "a", 22)}, 5, 0, 0, 0},
		// b's call, in flight since before a's, was answered late (its
		// connection stalled): the ledger took it first, and a's claim took
		// the operation over from it.
		{"a claim answered late, taken over meanwhile", []runEvent{sentAt(take(1, "a", 5000), 4990), sentAt(claim(2, "b", 7000), 100), start(1, "a", 9000)}, 0, 0, 0, 0},
		// Answered a lease after a's call: it may have taken a's over.
		{"a claim answered a lease later", []runEvent{sentAt(take(1, "a", 5000), 4990), sentAt(claim(2, "b", 4990+lease), 100), start(1, "a", 5000+lease+10)}, 0, 1, 0, 0},
		{"a claim sent after the answer", []runEvent{sentAt(claim(1, "a", 5000), 4990), sentAt(take(2, "b", 5200), 5010), start(1, "a", 5300)}, 0, 1, 0, 1},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			var forgets []forgetRec
			if tc.forgotten > 0 {
				forgets = append(forgets, forgetRec{key: "k", from: time.Unix(0, tc.forgotten*int64(time.Millisecond))})
			}
			h := newClaimHistory(tc.events, forgets)
			if lost := h.afterLoss(); len(lost) != tc.lost || h.unknowing != tc.unknowing {
				t.Fatalf("after loss %d %q, unknowing %d; want %d, %d", len(lost), lost, h.unknowing, tc.lost, tc.unknowing)
			}
			// Every run was alive until long after.
			runs := map[int]*runInfo{1: {endedAt: time.Unix(100, 0)}, 2: {endedAt: time.Unix(100, 0)}}
			if n := h.takenUnstarted(runs); n != tc.taken {
				t.Fatalf("taken over unstarted %d, want %d", n, tc.taken)
			}
		})
	}
}

// TestAddStats checks that addStats sums every counter of worker.Stats.
func TestAddStats(t *testing.T) {
	var a, b worker.Stats
	for i := range reflect.TypeFor[worker.Stats]().NumField() {
		reflect.ValueOf(&a).Elem().Field(i).SetInt(int64(i + 1))
		reflect.ValueOf(&b).Elem().Field(i).SetInt(int64(100 * (i + 1)))
	}
	addStats(&a, b)
	for i := range reflect.TypeFor[worker.Stats]().NumField() {
		if got := reflect.ValueOf(a).Field(i).Int(); got != int64(101*(i+1)) {
			t.Errorf("%s: %d, want %d", reflect.TypeFor[worker.Stats]().Field(i).Name, got, 101*(i+1))
		}
	}
}
