package ledger

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestExpiry_QuickWriteKeepsTheClaims: a completion within expirySlack of
// its claim keeps the claim's expiry and its expiry index entry, so that
// its commit rewrites no older index page; a later one moves them. List's
// newest first still finds it by the time of its last write, and the sweep
// removes it at the claim's expiry.
func TestExpiry_QuickWriteKeepsTheClaims(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const retention = time.Hour
	db, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{Retention: retention, Now: clock, CompleteDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries := func() []string {
		var ks []string
		_ = db.bolt.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketExpiry).ForEach(func(k, _ []byte) error { ks = append(ks, string(k)); return nil })
		})
		return ks
	}
	claimComplete := func(key string, after time.Duration) Record {
		t.Helper()
		if c, err := db.Claim(ctx, ClaimRequest{Key: key, Owner: "o-" + key, Lease: time.Minute}); err != nil || c.Outcome != Claimed {
			t.Fatalf("claim %s: %+v %v", key, c, err)
		}
		advance(after)
		if err := db.Complete(ctx, Completion{Key: key, Owner: "o-" + key}); err != nil {
			t.Fatal(err)
		}
		rec, err := db.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkIndexes(db); err != nil {
			t.Fatal(err)
		}
		return rec
	}

	t0 := clock()
	quick := claimComplete("quick", 400*time.Millisecond)
	if !quick.Expires.Equal(t0.Add(retention)) || !quick.Updated.Equal(t0.Add(400*time.Millisecond)) {
		t.Fatalf("a completion 400 ms after its claim: expires %v, updated %v; want the claim's expiry %v", quick.Expires, quick.Updated, t0.Add(retention))
	}
	if got := entries(); len(got) != 1 || got[0] != string(indexKey(t0.Add(retention), "quick")) {
		t.Fatalf("expiry index %q, want the claim's entry alone", got)
	}

	advance(time.Second)
	t1 := clock()
	slow := claimComplete("slow", expirySlack)
	if want := t1.Add(expirySlack + retention); !slow.Expires.Equal(want) {
		t.Fatalf("a completion %v after its claim: expires %v, want its own write's %v", expirySlack, slow.Expires, want)
	}

	// Newest first, written since the quick completion: both, the quick
	// one though its entry is its claim's, 400 ms before.
	page, err := db.List(ctx, Filter{Newest: true, Since: quick.Updated}, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Records[0].Key != "slow" || page.Records[1].Key != "quick" {
		t.Fatalf("newest first since %v: %v", quick.Updated, keysOf(page.Records))
	}

	// At the claim's expiry the quick record is gone and swept.
	advance(t0.Add(retention).Sub(clock()))
	if _, err := db.Get(ctx, "quick"); err == nil {
		t.Fatal("the quick record is still there at its claim's expiry")
	}
	if n, err := db.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep at the claim's expiry: %d, %v; want the quick record", n, err)
	}
	if err := checkIndexes(db); err != nil {
		t.Fatal(err)
	}
}

func keysOf(rs []Record) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Key)
	}
	return ks
}
