package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// stallDeadline turns a writer stuck behind a reader into a failure instead
// of a hung test. It is not a measure of speed.
const stallDeadline = 30 * time.Second

// fillKeys claims keys prefix00000.. in batches, so a test starts with a
// ledger of realistic size quickly.
func fillKeys(t *testing.T, db *ledger.DB, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		var reqs []ledger.ClaimRequest
		for j := i; j < min(i+500, n); j++ {
			reqs = append(reqs, ledger.ClaimRequest{Key: fmt.Sprintf("%s%05d", prefix, j), Owner: "o", Lease: time.Hour})
		}
		if _, err := db.ClaimBatch(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
}

// growFile claims and completes keys with results of the largest size until
// the file is at least twice as large as it was: bbolt must then map it
// anew, which waits for every open read transaction.
func growFile(ctx context.Context, db *ledger.DB, path string) (from, to int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	start := fi.Size()
	big := make([]byte, ledger.MaxResultLen)
	for round := 0; ; round++ {
		fi, err := os.Stat(path)
		if err != nil {
			return 0, 0, err
		}
		if fi.Size() >= 2*start {
			return start, fi.Size(), nil
		}
		if round == 1000 {
			return 0, 0, fmt.Errorf("file still %d bytes after %d rounds, started at %d", fi.Size(), round, start)
		}
		var reqs []ledger.ClaimRequest
		var cs []ledger.Completion
		for j := range 100 {
			key := fmt.Sprintf("grow-%s-%03d-%03d", filepath.Base(path), round, j)
			reqs = append(reqs, ledger.ClaimRequest{Key: key, Owner: "g", Lease: time.Hour})
			cs = append(cs, ledger.Completion{Key: key, Owner: "g", Result: big})
		}
		if _, err := db.ClaimBatch(ctx, reqs); err != nil {
			return 0, 0, err
		}
		for _, err := range db.CompleteBatch(ctx, cs) {
			if err != nil {
				return 0, 0, err
			}
		}
	}
}

func TestDB_ForEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A reader that stops reading (an export piped into a pager, say) must
	// not stop writes, not even those that make bbolt grow its memory map,
	// nor the readers that queue behind such a write.
	t.Run("StalledReaderStallsNoOne", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db := openTest(t, path, nil)
		const n = 20000
		fillKeys(t, db, "k", n)

		reading, release := make(chan struct{}), make(chan struct{})
		walked := make(chan error, 1)
		var seen []string
		go func() {
			walked <- db.ForEach(ctx, ledger.Filter{Prefix: "k"}, func(r ledger.Record) error {
				if len(seen) == 0 {
					close(reading)
					<-release
				}
				seen = append(seen, r.Key)
				return nil
			})
		}()
		<-reading
		released := false
		unblock := func() {
			if !released {
				released = true
				close(release)
			}
		}
		defer unblock()

		wrote := make(chan error, 1)
		var from, to int64
		go func() {
			var err error
			from, to, err = growFile(ctx, db, path)
			wrote <- err
		}()
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the file grew from %d to %d bytes while the reader was stalled", from, to)
		case <-time.After(stallDeadline):
			t.Fatalf("writes that grow the file did not finish within %v while a reader was stalled", stallDeadline)
		}
		stats := make(chan error, 1)
		go func() {
			_, err := db.Stats(ctx)
			stats <- err
		}()
		select {
		case err := <-stats:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(stallDeadline):
			t.Fatalf("Stats did not return within %v while a reader was stalled", stallDeadline)
		}
		select {
		case err := <-walked:
			t.Fatalf("the stalled walk ended by itself: %v", err)
		default:
		}

		unblock()
		if err := <-walked; err != nil {
			t.Fatal(err)
		}
		if len(seen) != n || !slices.IsSorted(seen) || seen[0] != "k00000" || seen[n-1] != fmt.Sprintf("k%05d", n-1) {
			t.Fatalf("walk saw %d records (sorted: %v), want k00000..k%05d", len(seen), slices.IsSorted(seen), n-1)
		}
	})

	// A walk in several transactions sees each record that exists for the
	// whole walk exactly once, in key order, while records before and
	// after its position are written and removed.
	t.Run("WritesDuringTheWalk", func(t *testing.T) {
		t.Parallel()
		db := openTest(t, filepath.Join(t.TempDir(), "ledger.db"), nil)
		const n = 3000
		fillKeys(t, db, "k", n)
		var seen []string
		err := db.ForEach(ctx, ledger.Filter{Prefix: "k"}, func(r ledger.Record) error {
			seen = append(seen, r.Key)
			if strings.HasSuffix(r.Key, "-new") {
				return nil // a record written during the walk
			}
			var i int
			if _, err := fmt.Sscanf(r.Key, "k%05d", &i); err != nil {
				return err
			}
			// Remove an odd key not seen yet and one already seen,
			// and add keys on both sides of the walk's position.
			if j := i + 7; j < n && j%2 == 1 && i%50 == 0 {
				if err := db.Forget(ctx, fmt.Sprintf("k%05d", j)); err != nil {
					return err
				}
			}
			if i%50 == 0 && i > 0 {
				if err := db.Forget(ctx, fmt.Sprintf("k%05d", i-1)); err != nil {
					return err
				}
				if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: fmt.Sprintf("k%05d-new", i-3), Owner: "o", Lease: time.Hour}); err != nil {
					return err
				}
				if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: fmt.Sprintf("k%05d-new", i+3), Owner: "o", Lease: time.Hour}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Fatal("the walk went back or saw a record twice")
		}
		got := map[string]bool{}
		for _, k := range seen {
			got[k] = true
		}
		for i := range n {
			key := fmt.Sprintf("k%05d", i)
			forgottenAhead := i%2 == 1 && (i-7)%50 == 0 && i-7 >= 0
			forgottenBehind := (i+1)%50 == 0 && i+1 < n
			if !forgottenAhead && !forgottenBehind && !got[key] {
				t.Fatalf("%s was present for the whole walk but not seen", key)
			}
		}
	})
}
