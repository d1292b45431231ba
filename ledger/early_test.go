package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/fstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// gate holds the committer inside Options.OnCommit while it is shut, so that
// a test can look at callers while a commit is not yet reported.
type gate struct {
	mu      sync.Mutex
	shut    chan struct{} // nil when open
	entered chan struct{}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.entered = make(chan struct{}), make(chan struct{}, 1)
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *gate) hook(int, time.Duration, error) {
	g.mu.Lock()
	shut, entered := g.shut, g.entered
	g.mu.Unlock()
	if shut != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-shut
	}
}

func openGated(t *testing.T, path string, g *gate) *ledger.DB {
	t.Helper()
	db, err := ledger.Open(path, ledger.Options{Retention: ledgertest.Retention, OnCommit: g.hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.open(); db.Close() })
	return db
}

func TestClaimBatchStart_AnswersBeforeTheCommitIsReported(t *testing.T) {
	ctx := context.Background()
	g := &gate{}
	db := openGated(t, filepath.Join(t.TempDir(), "ledger.db"), g)
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "done", Owner: "o1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, ledger.Completion{Key: "done", Owner: "o1"}); err != nil {
		t.Fatal(err)
	}

	g.close()
	p, err := db.ClaimBatchStart(ctx, []ledger.ClaimRequest{
		{Key: "done", Owner: "o2", Lease: time.Minute},
		{Key: "new", Owner: "o3", Lease: time.Minute},
		{Key: "new", Owner: "o4", Lease: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The committer is held after the commit: the answer came first.
	<-g.entered
	got := []ledger.Outcome{p.Claims[0].Outcome, p.Claims[1].Outcome, p.Claims[2].Outcome}
	want := []ledger.Outcome{ledger.AlreadyComplete, ledger.Claimed, ledger.InProgress}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait before the commit was reported: %v, want the context's deadline", err)
	}
	g.open()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("second Wait: %v", err)
	}
	rec, err := db.Get(ctx, "new")
	if err != nil || rec.State != ledger.StateInProgress || rec.Owner != "o3" {
		t.Fatalf("record after the commit: %+v, %v", rec, err)
	}
}

// TestClaimBatchStart_DiskFull fills a small tmpfs until a commit fails: a
// claim answered early whose commit failed leaves no record, and after the
// failure claims are answered only once their commit is over.
func TestClaimBatchStart_DiskFull(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(fstest.Tmpfs(t, "2m"), "ledger.db")
	g := &gate{}
	db := openGated(t, path, g)
	big := make([]byte, ledger.MaxResultLen)

	var failedAfterAnswer []string
	var failure error
	for i := 0; i < 100000 && failure == nil; i++ {
		key := fmt.Sprintf("key-%06d", i)
		p, err := db.ClaimBatchStart(ctx, []ledger.ClaimRequest{{Key: key, Owner: "o" + key, Lease: time.Hour}})
		if err != nil {
			failure = err
			break
		}
		if p.Claims[0].Outcome != ledger.Claimed {
			t.Fatalf("claim %s: %s", key, p.Claims[0].Outcome)
		}
		if err := p.Wait(ctx); err != nil {
			failedAfterAnswer = append(failedAfterAnswer, key)
			failure = err
			break
		}
		if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: "o" + key, Result: big}); err != nil {
			failure = err
		}
	}
	if !errors.Is(failure, syscall.ENOSPC) {
		t.Fatalf("filling a 2 MiB disk ended with %v, want ENOSPC", failure)
	}
	for _, key := range failedAfterAnswer {
		if _, err := db.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("claim %s answered early, commit failed: Get says %v, want ErrNotFound", key, err)
		}
	}

	// For a while after a failure, answers wait for their commit, even
	// after a commit that succeeds in between.
	type answer struct {
		p   *ledger.PendingClaims
		err error
	}
	var next []error
	for _, key := range []string{"after-1", "after-2"} {
		g.close()
		answered := make(chan answer, 1)
		go func() {
			p, err := db.ClaimBatchStart(ctx, []ledger.ClaimRequest{{Key: key, Owner: "o-" + key, Lease: time.Hour}})
			answered <- answer{p, err}
		}()
		<-g.entered
		select {
		case a := <-answered:
			t.Fatalf("%s: after a failed commit a claim was answered before its commit was over: %+v", key, a)
		case <-time.After(100 * time.Millisecond):
		}
		g.open()
		a := <-answered
		if a.err == nil {
			// The claim fitted in pages the file already had: it is durable.
			if err := a.p.Wait(ctx); err != nil {
				t.Fatalf("%s: answered after its commit, Wait says %v", key, err)
			}
		} else if !errors.Is(a.err, syscall.ENOSPC) {
			t.Fatalf("%s: claim on a full disk: %v, want ENOSPC", key, a.err)
		}
		next = append(next, a.err)
	}
	t.Logf("first failure: %v; early answers whose commit failed: %d; next claims: %v", failure, len(failedAfterAnswer), next)
}

func TestCompleteDelay(t *testing.T) {
	ctx := context.Background()
	const delay = 300 * time.Millisecond
	var mu sync.Mutex
	var sizes []int
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{
		CompleteDelay: delay,
		OnCommit: func(n int, _ time.Duration, _ error) {
			mu.Lock()
			sizes = append(sizes, n)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"a", "b"} {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: k, Owner: k, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	sizes = nil
	mu.Unlock()

	// Alone, a completion waits the whole delay.
	start := time.Now()
	if err := db.Complete(ctx, ledger.Completion{Key: "a", Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("a lone completion committed after %v, before the %v delay", took, delay)
	}

	// A claim that comes during the wait takes the completion along.
	done := make(chan error, 1)
	go func() { done <- db.Complete(ctx, ledger.Completion{Key: "b", Owner: "b"}) }()
	time.Sleep(delay / 6)
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "c", Owner: "c", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sizes) != "[1 2]" {
		t.Fatalf("requests per commit: %v, want [1 2] (the lone completion, then the claim with the waiting completion)", sizes)
	}
}
