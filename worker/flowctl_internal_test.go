package worker

import (
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Messages deferred for a busy partition come back one bucket interval
// apart, after those deferred for it before, whatever start the bucket
// gave each; the handler's own bucket and other partition values keep no
// queue; a queue longer than SQS's longest delay is not lengthened.
func TestDeferUntil_Queues(t *testing.T) {
	w := &Worker{cfg: Config{Flow: FlowConfig{Mode: FlowOn, Scope: "q"}}}
	f := newFlowCtl(w, nil)
	r := ledger.Reservation{
		Buckets: []ledger.Bucket{{Name: "q", Rate: 0.5, Burst: 1}, {Name: "q | pointer /t = hot", Rate: 0.1, Burst: 1}, {Name: "q | pointer /t = cold", Rate: 0.1, Burst: 1}},
		Tokens:  []ledger.Token{{Buckets: []int{0, 1}}, {Buckets: []int{0, 2}}},
	}
	// The buckets' interval is 10 s; a slow machine may take a second or
	// two between the test's clock and deferUntil's.
	near := func(got, want time.Duration) bool { return got > want-2*time.Second && got <= want }
	due := time.Now().Add(100 * time.Second)
	for i := range 5 {
		if d, want := f.deferUntil(&r, 0, due), 100*time.Second+time.Duration(i)*10*time.Second; !near(d, want) {
			t.Fatalf("hot message %d deferred for %v, want about %v", i, d, want)
		}
	}
	if d := f.deferUntil(&r, 0, due.Add(10*time.Minute)); !near(d, 700*time.Second) {
		t.Fatalf("a hot message due after the queue deferred for %v, want about its own 700s", d)
	}
	if d := f.deferUntil(&r, 1, due); !near(d, 100*time.Second) {
		t.Fatalf("the first cold message deferred for %v, want about 100s: the hot queue is not its", d)
	}
	if d := f.deferUntil(&r, 0, time.Now().Add(time.Hour)); d != maxDelay {
		t.Fatalf("a message due in an hour deferred for %v, want SQS's longest delay", d)
	}
	if d := f.deferUntil(&r, 0, due); !near(d, 710*time.Second) {
		t.Fatalf("after a message deferred for the longest delay, the next deferred for %v, want about 710s: the queue is not lengthened", d)
	}
	if _, ok := f.scopes["q"]; ok {
		t.Fatal("the handler's own bucket keeps a queue")
	}
}
