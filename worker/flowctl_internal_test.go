package worker

import (
	"context"
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
			if b.Name == "q"+deferredQueue {
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
