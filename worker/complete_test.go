package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
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
		go func() { answers <- w.recordComplete(&job{}, ledger.Completion{Key: key, Owner: "o"}) }()
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

// countingLedger counts CompleteBatch calls and the completions in each.
type countingLedger struct {
	*ledger.DB
	mu    sync.Mutex
	sizes []int
}

func (l *countingLedger) CompleteBatch(ctx context.Context, cs []ledger.Completion) []error {
	l.mu.Lock()
	l.sizes = append(l.sizes, len(cs))
	l.mu.Unlock()
	return l.DB.CompleteBatch(ctx, cs)
}

func (l *countingLedger) calls() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sizes)
}

// siblingsFixture claims n keys for the running messages of one received
// batch, on a worker whose completers run until cleanup.
func siblingsFixture(t *testing.T, n int, linger time.Duration) (*Worker, *countingLedger, []*job) {
	t.Helper()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := &countingLedger{DB: db}
	// slots takes the room in hand that a completing message gives back.
	w := &Worker{ledger: l, completes: make(chan completion, 4*MaxMessagesPerReceive), completeLinger: linger, slots: make(chan struct{}, n)}
	done := make(chan struct{})
	go func() { w.completeLoop(); close(done) }()
	t.Cleanup(func() {
		close(w.completes)
		<-done
		db.Close()
	})
	b := &batch{w: w, kick: make(chan struct{})}
	js := make([]*job, n)
	for i := range js {
		key := fmt.Sprintf("k%d", i)
		if _, err := db.Claim(context.Background(), ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		js[i] = &job{key: derived{key: key}, owner: "o", b: b, st: running}
		b.active++
	}
	return w, l, js
}

// The messages of one batch that finish apart are recorded complete in one
// call once the last of them has finished or ended otherwise, and each gets
// its own answer.
func TestWorker_BatchCompletionsRecordedTogether(t *testing.T) {
	t.Parallel()
	w, l, js := siblingsFixture(t, 4, time.Hour)
	answers := make(chan error, len(js))
	complete := func(j *job) {
		j.b.move(j, completing, running)
		go func() { answers <- w.recordComplete(j, ledger.Completion{Key: j.key.key, Owner: j.owner}) }()
	}
	complete(js[0])
	time.Sleep(20 * time.Millisecond)
	complete(js[1])
	time.Sleep(20 * time.Millisecond)
	// The third fails: its siblings stop waiting for it.
	js[2].b.move(js[2], failed, running)
	if got := l.calls(); len(got) != 0 {
		t.Fatalf("recorded before the batch's last message finished: calls of %v", got)
	}
	complete(js[3])
	for range 3 {
		if err := <-answers; err != nil {
			t.Fatal(err)
		}
	}
	if got := l.calls(); !slices.Equal(got, []int{3}) {
		t.Errorf("calls of %v completions: want the batch's three in one", got)
	}
	// Done and failed, a job is no longer running: moving it again does
	// nothing (it would miscount otherwise).
	for _, j := range js {
		if j.b.move(j, failed, running) {
			t.Errorf("%s moved from running twice", j.key.key)
		}
	}
}

// A completion waits for its batch's running messages at most the linger.
func TestWorker_BatchCompletionWaitBounded(t *testing.T) {
	t.Parallel()
	w, l, js := siblingsFixture(t, 2, 50*time.Millisecond)
	start := time.Now()
	js[0].b.move(js[0], completing, running)
	if err := w.recordComplete(js[0], ledger.Completion{Key: js[0].key.key, Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("recorded after %v, while its sibling still ran: want the linger's 50ms", waited)
	}
	// The sibling that was left behind is recorded at once when it comes.
	js[1].b.move(js[1], completing, running)
	if err := w.recordComplete(js[1], ledger.Completion{Key: js[1].key.key, Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	if got := l.calls(); !slices.Equal(got, []int{1, 1}) {
		t.Errorf("calls of %v completions, want [1 1]", got)
	}
}
