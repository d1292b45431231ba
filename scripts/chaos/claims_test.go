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
	ev := func(kind, key, owner string, at int64) event.WorkerEvent {
		return event.WorkerEvent{Ev: kind, Key: key, Owner: owner, T: at * int64(time.Millisecond)}
	}
	for _, tc := range []struct {
		name      string
		events    map[int][]event.WorkerEvent // by run
		forgotten map[string][]int64          // key -> ms
		lost      int
		unknowing int
		taken     int // claims taken over from a live run before it started them
	}{
		{"own claim", map[int][]event.WorkerEvent{1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 20)}}, nil, 0, 0, 0},
		{"started before the takeover", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 20)},
			2: {{Ev: event.EvClaim, Key: "k", Owner: "b", T: 30 * int64(time.Millisecond), Takeover: true}, ev(event.EvStart, "k", "b", 31)},
		}, nil, 0, 0, 0},
		{"started after the takeover", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 40)},
			2: {{Ev: event.EvClaim, Key: "k", Owner: "b", T: 30 * int64(time.Millisecond), Takeover: true}},
		}, nil, 1, 0, 1},
		{"taken over, never started there", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvLost, "k", "a", 35)},
			2: {{Ev: event.EvClaim, Key: "k", Owner: "b", T: 30 * int64(time.Millisecond), Takeover: true}, ev(event.EvStart, "k", "b", 31)},
		}, nil, 0, 0, 1},
		{"another key's claim does not count", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 40)},
			2: {ev(event.EvClaim, "j", "b", 30)},
		}, nil, 0, 0, 0},
		{"started after its own release", map[int][]event.WorkerEvent{1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvRelease, "k", "a", 20), ev(event.EvStart, "k", "a", 30)}}, nil, 1, 0, 0},
		{"no claim written", map[int][]event.WorkerEvent{1: {ev(event.EvStart, "k", "a", 30)}}, nil, 1, 0, 0},
		{"forgotten, the worker told, then started", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvLost, "k", "a", 25), ev(event.EvStart, "k", "a", 30)},
		}, map[string][]int64{"k": {20}}, 1, 0, 0},
		{"forgotten, started before the worker was told", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 22), ev(event.EvLost, "k", "a", 25)},
		}, map[string][]int64{"k": {20}}, 0, 1, 0},
		{"forgotten before the claim", map[int][]event.WorkerEvent{
			1: {ev(event.EvClaim, "k", "a", 10), ev(event.EvStart, "k", "a", 22)},
		}, map[string][]int64{"k": {5}}, 0, 0, 0},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			h := newClaimHistory()
			for run, es := range tc.events {
				for _, e := range es {
					h.add(run, e)
				}
			}
			for key, ts := range tc.forgotten {
				for _, ms := range ts {
					h.forgotten[key] = append(h.forgotten[key], ms*int64(time.Millisecond))
				}
			}
			lost := h.afterLoss()
			if len(lost) != tc.lost || h.unknowing != tc.unknowing {
				t.Fatalf("after loss %d %q, unknowing %d; want %d, %d", len(lost), lost, h.unknowing, tc.lost, tc.unknowing)
			}
			// Every run was alive until long after.
			ended := map[int]time.Time{1: time.Unix(0, int64(time.Second)), 2: time.Unix(0, int64(time.Second))}
			if n := h.takenUnstarted(ended); n != tc.taken {
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
