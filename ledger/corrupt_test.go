package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// TestDB_CorruptRecord damages one stored record on a real file and checks
// that only the requests for that key fail, in batches shared with healthy
// keys, and that nothing is written over the damaged record.
func TestDB_CorruptRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	garbage := []byte{1, 9, 9, 9}

	// setup writes "bad" (in progress), "failed" (a retryable failure) and
	// "done" (complete), then replaces the stored value of "bad" with
	// garbage.
	setup := func(t *testing.T) (path string, db *ledger.DB) {
		t.Helper()
		path = filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"bad", "failed", "done"} {
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Fail(ctx, ledger.Failure{Key: "failed", Owner: "o", Err: "timeout"}); err != nil {
			t.Fatal(err)
		}
		if err := db.Complete(ctx, ledger.Completion{Key: "done", Owner: "o"}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("records")).Put([]byte("bad"), garbage)
		})
		return path, openTest(t, path, nil)
	}
	// stillGarbage checks that nothing was written over "bad".
	stillGarbage := func(t *testing.T, path string) {
		t.Helper()
		b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		b.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket([]byte("records")).Get([]byte("bad")); !bytes.Equal(v, garbage) {
				t.Errorf("the damaged record now holds %x, want it untouched", v)
			}
			return nil
		})
	}

	t.Run("ClaimBatch", func(t *testing.T) {
		t.Parallel()
		path, db := setup(t)
		reqs := []ledger.ClaimRequest{
			{Key: "new", Owner: "b1", Lease: time.Hour},
			{Key: "bad", Owner: "b2", Lease: time.Hour},
			{Key: "failed", Owner: "b3", Lease: time.Hour},
			{Key: "done", Owner: "b4", Lease: time.Hour},
		}
		cs, err := db.ClaimBatch(ctx, reqs)
		if err != nil {
			t.Fatalf("a batch with one damaged record failed as a whole: %v", err)
		}
		if !errors.Is(cs[1].Err, ledger.ErrCorrupt) || cs[1].Outcome != 0 || !bytes.Contains([]byte(cs[1].Err.Error()), []byte(`"bad"`)) {
			t.Fatalf("claim of the damaged record: %+v, want Err wrapping ErrCorrupt and naming the key, no outcome", cs[1])
		}
		for i, want := range map[int]ledger.Outcome{0: ledger.Claimed, 2: ledger.Claimed, 3: ledger.AlreadyComplete} {
			if cs[i].Err != nil || cs[i].Outcome != want {
				t.Fatalf("claim of %s: %s, %v; want %s", reqs[i].Key, cs[i].Outcome, cs[i].Err, want)
			}
		}
		if _, err := db.Claim(ctx, reqs[1]); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("Claim of the damaged record alone: %v, want ErrCorrupt", err)
		}
		// The healthy claims are durable.
		db.Close()
		stillGarbage(t, path)
		db = openTest(t, path, nil)
		for _, r := range []ledger.ClaimRequest{reqs[0], reqs[2]} {
			rec, err := db.Get(ctx, r.Key)
			if err != nil || rec.State != ledger.StateInProgress || rec.Owner != r.Owner {
				t.Fatalf("%s after reopening: %+v, %v; want in progress under %s", r.Key, rec, err, r.Owner)
			}
		}
	})

	t.Run("Transitions", func(t *testing.T) {
		t.Parallel()
		path, db := setup(t)
		for _, key := range []string{"h1", "h2"} {
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		errs := db.CompleteBatch(ctx, []ledger.Completion{{Key: "h1", Owner: "o"}, {Key: "bad", Owner: "o"}})
		if errs[0] != nil || !errors.Is(errs[1], ledger.ErrCorrupt) {
			t.Fatalf("complete batch: %v, want nil and ErrCorrupt", errs)
		}
		errs = db.FailBatch(ctx, []ledger.Failure{{Key: "bad", Owner: "o", Err: "x"}, {Key: "h2", Owner: "o", Err: "x"}})
		if !errors.Is(errs[0], ledger.ErrCorrupt) || errs[1] != nil {
			t.Fatalf("fail batch: %v, want ErrCorrupt and nil", errs)
		}
		if _, err := db.Extend(ctx, "bad", "o", time.Hour); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("extend of the damaged record: %v, want ErrCorrupt", err)
		}
		for _, err := range []error{db.Release(ctx, "bad", "o"), db.Reset(ctx, "bad")} {
			if !errors.Is(err, ledger.ErrCorrupt) {
				t.Fatalf("release or reset of the damaged record: %v, want ErrCorrupt", err)
			}
		}
		db.Close()
		stillGarbage(t, path)
		db = openTest(t, path, nil)
		if rec, err := db.Get(ctx, "h1"); err != nil || rec.State != ledger.StateComplete {
			t.Fatalf("h1 after reopening: %+v, %v; want complete", rec, err)
		}
		if rec, err := db.Get(ctx, "h2"); err != nil || rec.State != ledger.StateFailed {
			t.Fatalf("h2 after reopening: %+v, %v; want failed", rec, err)
		}
	})

	// Walks, sweeps and forget go past the damaged record: one damaged
	// record must not hide the rest, stop sweeping for good, or stay
	// forever.
	t.Run("WalkSweepForget", func(t *testing.T) {
		t.Parallel()
		clock := ledgertest.NewClock()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db := openTest(t, path, clock)
		for _, key := range []string{"a", "bad", "c"} {
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("records")).Put([]byte("bad"), garbage)
		})
		db = openTest(t, path, clock)
		var seen []string
		err := db.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { seen = append(seen, r.Key); return nil })
		if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), `1 record(s) could not be read and were left out, the first "bad"`) || strings.Join(seen, ",") != "a,c" {
			t.Fatalf("ForEach saw %q and returned %v; want a and c, then ErrCorrupt naming bad", seen, err)
		}
		// Everything expires: the sweep removes the readable records and
		// goes on past the damaged one.
		clock.Advance(ledgertest.Retention + time.Hour)
		if n, err := db.Sweep(ctx); err != nil || n != 2 {
			t.Fatalf("Sweep = %d, %v; want the 2 readable records removed", n, err)
		}
		if n, err := db.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("second Sweep = %d, %v", n, err)
		}
		if err := db.Forget(ctx, "bad"); err != nil {
			t.Fatalf("Forget of the damaged record: %v", err)
		}
		st, err := db.Stats(ctx)
		if err != nil || !st.OldestInProgress.IsZero() {
			t.Fatalf("Stats after forgetting: %+v, %v: the in-flight index still names the damaged record", st, err)
		}
		if c, err := db.Claim(ctx, ledger.ClaimRequest{Key: "bad", Owner: "p", Lease: time.Hour}); err != nil || c.Outcome != ledger.Claimed {
			t.Fatalf("claim after forgetting: %+v, %v", c, err)
		}
	})

}
