package ledger_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

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

// A completion written under WithoutDelay commits at once, however long the
// delay.
func TestCompleteDelay_WithoutDelay(t *testing.T) {
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{CompleteDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "a", Owner: "a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	done := make(chan []error, 1)
	go func() {
		done <- db.CompleteBatch(ledger.WithoutDelay(ctx), []ledger.Completion{{Key: "a", Owner: "a"}})
	}()
	select {
	case errs := <-done:
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a completion under WithoutDelay still waited for company (the delay is an hour)")
	}
	if r, err := db.Get(ctx, "a"); err != nil || r.State != ledger.StateComplete {
		t.Fatalf("a: %+v, %v", r, err)
	}
}
