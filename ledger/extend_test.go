package ledger_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// An Extend whose context ends while its write waits for the committer
// returns the context's error and the zero time, and does not read what the
// committer writes later: a data race under -race otherwise. Found by the
// chaos campaign (scripts/chaos) once the worker bounded each heartbeat.
func TestDB_ExtendContextEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var block atomic.Bool
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{
		OnCommit: func(int, time.Duration, error) {
			if block.CompareAndSwap(true, false) {
				// Hold the committer after this commit, by time alone: a
				// channel would order the Extend's return before the
				// committer's later write and hide the race.
				time.Sleep(300 * time.Millisecond)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}

	// A write that holds the committer once committed.
	block.Store(true)
	held := make(chan error, 1)
	go func() {
		_, err := db.Claim(ctx, ledger.ClaimRequest{Key: "other", Owner: "o2", Lease: time.Minute})
		held <- err
	}()
	for block.Load() {
		time.Sleep(time.Millisecond)
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	expiry, err := db.Extend(short, "k", "o", time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) || !expiry.IsZero() {
		t.Fatalf("Extend with an ended context: %v, %v; want the zero time and %v", expiry, err, context.DeadlineExceeded)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// The write took effect after all, as documented.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := db.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if time.Until(rec.LeaseExpiry) > 30*time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the extension never took effect: lease until %v", rec.LeaseExpiry)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
