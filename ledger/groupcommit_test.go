package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// A commit takes every request waiting when it starts, however many: the
// claims that queue while one commit is held up all go into the next.
func TestGroupCommitHasNoFixedBound(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	db, sizes := openCounting(t, func(commits int) {
		if commits == 1 {
			<-release // the committer waits here, after its first commit
		}
	})
	const n = 800
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Go(func() {
		// Its commit is answered once the committer goes on.
		_, err := db.Claim(ctx, ClaimRequest{Key: "first", Owner: "o", Lease: time.Minute})
		errs <- err
	})
	for len(sizes()) < 1 {
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
	waitNoErrors(t, &wg, errs)
	if got := sizes(); len(got) != 2 || got[1] != n {
		t.Fatalf("requests per commit: %v, want [1 %d]", got, n)
	}
}

// Writers that are ready to run when a write reaches an idle committer
// share its commit: the committer lets them hand their writes over before
// it commits, rather than commit the first alone and theirs after its
// fsync. One processor makes the order of goroutines certain: the first
// writer's send would otherwise run the committer before the others.
func TestGroupCommit_ReadyWritersShareTheCommit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	db, sizes := openCounting(t, nil)
	const n = 16
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := db.Claim(ctx, ClaimRequest{Key: fmt.Sprintf("k%d", i), Owner: "o", Lease: time.Minute})
			errs <- err
		})
	}
	runtime.Gosched() // let every writer reach its wait
	close(start)
	waitNoErrors(t, &wg, errs)
	if got := sizes(); len(got) != 1 {
		t.Fatalf("%d claims ready at once were committed in %d commits of %v requests, want one commit", n, len(got), got)
	}
}

// waitNoErrors waits for wg's writers, then fails t with the first error
// they sent on errs.
func waitNoErrors(t *testing.T, wg *sync.WaitGroup, errs chan error) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// openCounting opens a ledger in a temporary folder and returns it with
// the number of requests each of its commits carried so far. after, when
// set, runs in the committer after each commit, given how many there were.
func openCounting(t *testing.T, after func(commits int)) (*DB, func() []int) {
	t.Helper()
	var mu sync.Mutex
	var sizes []int
	db, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{
		OnCommit: func(n int, _ time.Duration, _ error) {
			mu.Lock()
			sizes = append(sizes, n)
			commits := len(sizes)
			mu.Unlock()
			if after != nil {
				after(commits)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}
