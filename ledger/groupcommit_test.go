package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A commit takes every request waiting when it starts, however many: the
// claims that queue while one commit is held up all go into the next.
func TestGroupCommitHasNoFixedBound(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	db, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{
		OnCommit: func(n int, _ time.Duration, _ error) {
			mu.Lock()
			sizes = append(sizes, n)
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-release // the committer waits here, after its first commit
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 800
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Go(func() {
		// Its commit is answered once the committer goes on.
		_, err := db.Claim(ctx, ClaimRequest{Key: "first", Owner: "o", Lease: time.Minute})
		errs <- err
	})
	for committed := false; !committed; {
		mu.Lock()
		committed = len(sizes) == 1
		mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	for i := range n {
		wg.Go(func() {
			_, err := db.Claim(ctx, ClaimRequest{Key: fmt.Sprintf("k%d", i), Owner: "o", Lease: time.Minute})
			errs <- err
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(db.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d claims queued after 30s", len(db.reqs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[1] != n {
		t.Fatalf("requests per commit: %v, want [1 %d]", sizes, n)
	}
}
