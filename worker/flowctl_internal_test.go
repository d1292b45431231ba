package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Messages deferred for a busy partition come back one bucket interval
// apart, after those deferred for it before by any worker sharing the
// ledger, whatever start the bucket gave each; the handler's own bucket
// and other partition values keep no queue; a queue longer than SQS's
// longest delay is not lengthened.
func TestTakeTurns_Queues(t *testing.T) {
	shared := newLocalFlow()
	worker := func() *flowCtl {
		f := newFlowCtl(&Worker{cfg: Config{Flow: FlowConfig{Mode: FlowOn, Scope: "q"}}}, nil)
		f.l = shared
		return f
	}
	f, other := worker(), worker()
	r := ledger.Reservation{
		Buckets: []ledger.Bucket{{Name: "q", Rate: 0.5, Burst: 1}, {Name: "q | pointer /t = hot", Rate: 0.1, Burst: 1}, {Name: "q | pointer /t = cold", Rate: 0.1, Burst: 1}},
		Tokens:  []ledger.Token{{Buckets: []int{0, 1}}, {Buckets: []int{0, 2}}},
	}
	// deferred takes the turns of messages of token k of r due after each
	// of dues, on f, and returns how long each is deferred for.
	deferred := func(f *flowCtl, k int, dues ...time.Duration) []time.Duration {
		var ts *turns
		now := time.Now()
		for _, d := range dues {
			ts = ts.add(f, &r, k, &job{}, now.Add(d))
		}
		for _, b := range ts.r.Buckets {
			if b.Name == deferredQueue+"q" {
				t.Fatal("the handler's own bucket keeps a queue")
			}
		}
		f.takeTurns(context.Background(), ts)
		var out []time.Duration
		for _, j := range ts.deferred() {
			out = append(out, j.deferFor)
		}
		return out
	}
	// The buckets' interval is 10 s; a slow machine may take a second or
	// two between the test's clock and takeTurns's.
	near := func(got, want time.Duration) bool { return got > want-2*time.Second && got <= want }
	for i, d := range deferred(f, 0, 100*time.Second, 100*time.Second, 100*time.Second) {
		if want := 100*time.Second + time.Duration(i)*10*time.Second; !near(d, want) {
			t.Fatalf("hot message %d deferred for %v, want about %v", i, d, want)
		}
	}
	for i, d := range deferred(other, 0, 100*time.Second, 100*time.Second) {
		if want := 130*time.Second + time.Duration(i)*10*time.Second; !near(d, want) {
			t.Fatalf("another worker's hot message %d deferred for %v, want about %v, after the first worker's", i, d, want)
		}
	}
	if d := deferred(f, 0, 700*time.Second); !near(d[0], 700*time.Second) {
		t.Fatalf("a hot message due after the queue deferred for %v, want about its own 700s", d[0])
	}
	if d := deferred(other, 1, 100*time.Second); !near(d[0], 100*time.Second) {
		t.Fatalf("the first cold message deferred for %v, want about 100s: the hot queue is not its", d[0])
	}
	if d := deferred(f, 0, time.Hour); d[0] != maxDelay {
		t.Fatalf("a message due in an hour deferred for %v, want SQS's longest delay", d[0])
	}
	if d := deferred(other, 0, 100*time.Second); !near(d[0], 710*time.Second) {
		t.Fatalf("after a message deferred for the longest delay, the next deferred for %v, want about 710s: the queue is not lengthened", d[0])
	}
}

// When the handler's scope and a partition's are both paused, their probes
// are one message: a probe chosen for one scope while the message held
// longest was not yet due, and another chosen for the second scope once
// it was, would each be held by the other's pause, and no probe would run
// until the pauses expired.
func TestTakeProbe_OneForBothScopes(t *testing.T) {
	f := pausingFlow(FlowPartition{Pointer: "/tenant", Rate: 1, Burst: 1})
	ctx := context.Background()
	h, p := "q", "q | pointer /tenant = t1"
	pauseScope(t, f, h, false)
	pauseScope(t, f, p, false)
	t0 := time.Now()
	x := &job{b: &batch{received: t0}, key: derived{key: "x"}, scopes: []string{h, p}, notBefore: t0.Add(300 * time.Millisecond), st: waiting}
	y := &job{b: &batch{received: t0.Add(time.Millisecond)}, key: derived{key: "y"}, scopes: []string{h, p}, st: waiting}
	f.mu.Lock()
	sh, sp := f.scopeOf(h), f.scopeOf(p)
	f.hold(x)
	f.hold(y)
	f.mu.Unlock()
	f.takeProbe(ctx, sh) // x, held longest, is not due yet: y
	time.Sleep(400 * time.Millisecond)
	f.takeProbe(ctx, sp) // x is due now
	key := func(j *job) string {
		if j == nil {
			return "none"
		}
		return j.key.key
	}
	if sh.probe == nil || sp.probe != sh.probe {
		t.Fatalf("the handler's scope probes with %s, the partition's with %s: want one message", key(sh.probe), key(sp.probe))
	}
	if ok, _, _ := f.admit(sh.probe); !ok {
		t.Fatal("the probe of both scopes may not start")
	}
}

// A lease lost to another claim is not the downstream's failure, even
// where retryable failures count towards a pause.
func TestFlowCounts_LeaseLostIsNotTheDownstreams(t *testing.T) {
	f := FlowConfig{PauseOn: []FailureClass{FailureUnavailable, FailureRetry}}
	if !f.counts(errors.New("502 from the partner")) {
		t.Fatal("a retryable failure does not count with pause_on retry")
	}
	if f.counts(fmt.Errorf("attempt: %w", errLeaseLost)) {
		t.Fatal("a lease lost to another claim counts towards a pause")
	}
}

// A probe whose claim was lost while its handler runs stays the probe
// until its attempt ends, so that no second probe starts beside it; a
// probe chosen that never started is free for the next at once. A pause by
// hand has no probe, even one chosen before it.
func TestProbe_KeptUntilItsAttemptEnds(t *testing.T) {
	f := pausingFlow()
	ctx := context.Background()
	pauseScope(t, f, "q", false)
	s := f.scopes["q"]
	probe := func(key string) *job {
		j := &job{b: &batch{received: time.Now()}, key: derived{key: key}, scopes: []string{"q"}, st: waiting}
		f.mu.Lock()
		f.hold(j)
		f.mu.Unlock()
		for range 3 { // a tick frees an orphaned probe, the next takes one
			if f.tick(ctx); s.probe == j {
				return j
			}
		}
		t.Fatalf("%s is not the probe", key)
		return nil
	}
	a := probe("a")
	f.began(a)
	a.st = lost // a beat found its claim lost: it ends while its handler runs
	f.forget(a)
	if s.probe != a {
		t.Fatal("a probe whose claim was lost while it runs is no longer the probe: another may start beside it")
	}
	f.ended(ctx, a, true, errLeaseLost)
	if s.probe != nil {
		t.Fatal("a probe is still the probe after its attempt ended")
	}
	b := probe("b")
	b.st = givenBack
	f.forget(b)
	if s.probe != nil {
		t.Fatal("a probe that ended before it started is still the probe")
	}
	c := probe("c")
	pauseScope(t, f, "q", true)
	if s.probe != nil {
		t.Fatal("a pause by hand keeps the probe chosen before it")
	}
	if ok, _, _ := f.admit(c); ok {
		t.Fatal("a pause by hand lets the probe chosen before it start")
	}
}

// pausingFlow is the flow control of a worker of scope "q" with parts.
func pausingFlow(parts ...FlowPartition) *flowCtl {
	w := &Worker{cfg: Config{VisibilityTimeout: 2 * time.Second, HandlerTimeout: 10 * time.Second,
		Flow: FlowConfig{Mode: FlowOn, Scope: "q", ProbeMax: 10 * time.Second, Trip: DefaultTrip, Partitions: parts}},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), ownerID: "me"}
	return newFlowCtl(w, nil)
}

// pauseScope pauses scope (by hand when manual), its probe due, and has f
// read it.
func pauseScope(t *testing.T, f *flowCtl, scope string, manual bool) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	d, _ := json.Marshal(PauseDoc{State: PausePaused, Since: now, Next: now.Add(-time.Second), Interval: time.Second, By: "auto", Manual: manual})
	r, _ := f.l.GetFlow(ctx, scope)
	if _, err := f.l.PutFlow(ctx, ledger.FlowDoc{Scope: scope, Data: d, TTL: time.Hour}, r.Doc.Version); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	s := f.scopeOf(scope)
	f.mu.Unlock()
	f.update(ctx, s, func(*PauseDoc, bool, time.Time) bool { return false })
}
