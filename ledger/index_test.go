package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestIndexesFollowRecords runs random operations on a few keys under a
// clock that moves in steps shorter and longer than a second, and after
// each one checks that the expiry index, the in-flight index and the
// per-state counters say exactly what the records say.
func TestIndexesFollowRecords(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	const retention = time.Hour
	db, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{Retention: retention, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "d", "e"}
	owners := map[string]string{} // key -> the owner of its last claim
	for step := range 3000 {
		key := keys[rng.IntN(len(keys))]
		owner := owners[key]
		var op string
		switch r := rng.IntN(100); {
		case r < 30:
			op = "claim"
			owner = fmt.Sprintf("o%d", step)
			var c Claim
			if c, err = db.Claim(ctx, ClaimRequest{Key: key, Owner: owner, Lease: 3 * time.Second}); err == nil && c.Outcome == Claimed {
				owners[key] = owner
			}
		case r < 55:
			op, err = "complete", db.Complete(ctx, Completion{Key: key, Owner: owner})
		case r < 65:
			op, err = "fail", db.Fail(ctx, Failure{Key: key, Owner: owner, Err: "x", Permanent: rng.IntN(4) == 0})
		case r < 75:
			op = "extend"
			_, err = db.Extend(ctx, key, owner, 3*time.Second)
		case r < 80:
			op, err = "release", db.Release(ctx, key, owner)
		case r < 84:
			op, err = "reset", db.Reset(ctx, key)
		case r < 88:
			op, err = "forget", db.Forget(ctx, key)
		default:
			op = "sweep"
			_, err = db.Sweep(ctx)
		}
		if err != nil && !isAnswer(err) {
			t.Fatalf("step %d %s %s: %v", step, op, key, err)
		}
		if err := checkIndexes(db); err != nil {
			t.Fatalf("step %d, after %s %s: %v", step, op, key, err)
		}
		mu.Lock()
		switch r := rng.IntN(10); {
		case r < 6:
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		case r < 9:
			now = now.Add(time.Duration(rng.IntN(5)) * time.Second)
		default:
			now = now.Add(retention)
		}
		mu.Unlock()
	}
}

// checkIndexes compares the indexes and counters with the records.
func checkIndexes(db *DB) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		var wantExpiry, wantInFlight, gotExpiry, gotInFlight []string
		var counts [numClasses]uint64
		err := tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			r, err := decodeRecord(string(k), v)
			if err != nil {
				return err
			}
			wantExpiry = append(wantExpiry, string(indexKey(r.Expires, r.Key)))
			if r.State == StateInProgress {
				wantInFlight = append(wantInFlight, string(indexKey(r.Claimed, r.Key)))
			}
			counts[class(&r)]++
			return nil
		})
		if err != nil {
			return err
		}
		_ = tx.Bucket(bucketExpiry).ForEach(func(k, _ []byte) error { gotExpiry = append(gotExpiry, string(k)); return nil })
		_ = tx.Bucket(bucketInFlight).ForEach(func(k, _ []byte) error { gotInFlight = append(gotInFlight, string(k)); return nil })
		slices.Sort(wantExpiry)
		slices.Sort(wantInFlight)
		if !slices.Equal(gotExpiry, wantExpiry) {
			return fmt.Errorf("expiry index %q, records say %q", gotExpiry, wantExpiry)
		}
		if !slices.Equal(gotInFlight, wantInFlight) {
			return fmt.Errorf("in-flight index %q, records say %q", gotInFlight, wantInFlight)
		}
		for c := range numClasses {
			if got := readCounter(tx.Bucket(bucketMeta), counterKeys[c]); got != counts[c] {
				return fmt.Errorf("counter %s is %d, records say %d", counterKeys[c], got, counts[c])
			}
		}
		return nil
	})
}
