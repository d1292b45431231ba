package main

import (
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// TestStoppedHolding checks when the audit takes a message's last receive
// to have ended with its run stopped holding it.
func TestStoppedHolding(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	ev := func(run int, kind, msg string, s float64) runEvent {
		return runEvent{run, event.WorkerEvent{Ev: kind, Key: "k", MessageID: msg, Send: "s-1", T: at(s).UnixNano()}}
	}
	for _, c := range []struct {
		name   string
		events []runEvent
		run    *runInfo
		paused []window
		want   bool
		when   float64
	}{
		{"drained holding it", []runEvent{ev(1, event.EvReceive, "m", 10), ev(1, event.EvRelease, "", 22)},
			&runInfo{stoppedAt: at(20), endedAt: at(25)}, nil, true, 20},
		{"given back before its stop", []runEvent{ev(1, event.EvReceive, "m", 10), ev(1, event.EvRelease, "", 15)},
			&runInfo{stoppedAt: at(20), endedAt: at(25)}, nil, false, 0},
		{"deleted before its stop", []runEvent{ev(1, event.EvReceive, "m", 10), ev(1, event.EvDelete, "m", 12)},
			&runInfo{stoppedAt: at(20), endedAt: at(20)}, nil, false, 0},
		{"stopped past the visibility timeout", []runEvent{ev(1, event.EvReceive, "m", 10), ev(1, event.EvRelease, "", 30)},
			&runInfo{}, []window{{at(5), at(9)}, {at(12), at(12).Add(workerVisibility + time.Second)}}, true, 12},
		{"stopped briefly", []runEvent{ev(1, event.EvReceive, "m", 10)},
			&runInfo{}, []window{{at(12), at(12).Add(workerVisibility / 2)}}, false, 0},
		{"still running", []runEvent{ev(1, event.EvReceive, "m", 10)}, &runInfo{}, nil, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &history{e: &env{paused: map[int][]window{1: c.paused}}, all: c.events, runs: map[int]*runInfo{1: c.run},
				byKey: map[string][]runEvent{"k": c.events}}
			run, when := h.endedHolding("s-1")
			if got := run == 1; got != c.want || got && !when.Equal(at(c.when)) {
				t.Fatalf("run %d stopped at %v; want %v at %v", run, when, c.want, at(c.when))
			}
		})
	}
}
