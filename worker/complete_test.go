package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// heldLedger holds back every CompleteBatch until released, and counts.
type heldLedger struct {
	*ledger.DB
	release chan struct{}
	calls   atomic.Int64
	asked   atomic.Int64
}

func (l *heldLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	l.calls.Add(1)
	l.asked.Add(int64(len(cs)))
	<-l.release
	return l.DB.CompleteBatch(ctx, cs)
}

// The completions that wait while the ledger is busy are recorded together,
// in one call, not one call each.
func TestWorker_CompletionsRecordedTogether(t *testing.T) {
	t.Parallel()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := &heldLedger{DB: db, release: make(chan struct{})}
	w := &Worker{ledger: l, completes: make(chan completion, 4*MaxMessagesPerReceive)}
	ctx := context.Background()
	done := make(chan struct{})
	go func() { w.completeLoop(); close(done) }()
	answers := make(chan error, 10)
	deadline := time.Now().Add(20 * time.Second)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %d calls, %d completions waiting", what, l.calls.Load(), len(w.completes))
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		go func() { answers <- w.recordComplete(ledger.Completion{Key: key, Owner: "o"}) }()
		if i < completers {
			// Each completer takes one and is held in the ledger.
			waitFor("a held call", func() bool { return l.calls.Load() == int64(i+1) })
		}
	}
	// The other eight completions wait while the ledger is busy.
	waitFor("the waiting completions", func() bool { return len(w.completes) == 10-completers })
	close(l.release)
	for range 10 {
		if err := <-answers; err != nil {
			t.Fatal(err)
		}
	}
	close(w.completes)
	<-done
	if calls, asked := l.calls.Load(), l.asked.Load(); asked != 10 || calls > completers+2 {
		t.Errorf("%d completions in %d calls: want the eight that waited in at most two", asked, calls)
	}
	for i := range 10 {
		if rec, err := db.Get(ctx, fmt.Sprintf("k%d", i)); err != nil || rec.State != ledger.StateComplete {
			t.Errorf("k%d: %+v, %v", i, rec, err)
		}
	}
}
