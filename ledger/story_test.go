package ledger

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestStory_RoundTrip: a history and a payload read back as written, and a
// payload is cut to its bounds, attributes first in name order.
func TestStory_RoundTrip(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	h := []Attempt{
		{Start: t0, End: t0.Add(time.Second), Owner: "host/1/abc/7", Outcome: AttemptFailed, Error: "503 from bank"},
		{Start: t0.Add(2 * time.Second), End: t0.Add(3 * time.Second), Owner: "host/1/abc/9", Outcome: AttemptLapsed},
		{End: t0.Add(4 * time.Second), Owner: "x", Outcome: AttemptComplete},
	}
	got, ok := DecodeHistory(EncodeHistory(h))
	if !ok || fmt.Sprint(got) != fmt.Sprint(h) {
		t.Fatalf("history read back: %v (%v), want %v", got, ok, h)
	}
	if _, ok := DecodeHistory([]byte{1, 5}); ok {
		t.Fatal("a history cut short was read")
	}
	p := &Payload{Body: []byte("{\"id\":1}"), Attributes: map[string]string{"B": "2", "A": "1"}}
	if q := DecodePayload(EncodePayload(p)); q == nil || string(q.Body) != string(p.Body) || fmt.Sprint(q.Attributes) != fmt.Sprint(p.Attributes) || q.Cut {
		t.Fatalf("payload read back: %+v", q)
	}
	big := &Payload{Body: []byte(strings.Repeat("é", MaxPayload)), Attributes: map[string]string{"Big": strings.Repeat("v", MaxPayload), "A": "1"}}
	b := big.Bounded()
	if !b.Cut || b.Attributes["A"] != "1" || len(b.Attributes) != 1 || len(b.Body)+2 > MaxPayload || strings.ContainsRune(string(b.Body), '\uFFFD') {
		t.Fatalf("bounded: cut %v, attributes %d, body %d bytes", b.Cut, len(b.Attributes), len(b.Body))
	}
	if q := DecodePayload(EncodePayload(b)); q == nil || len(q.Body) != len(b.Body) || !q.Cut {
		t.Fatal("a bounded payload does not read back")
	}
	r := Record{Attempts: 0}
	EndAttempt(&r, time.Time{}, t0, AttemptComplete, "")
	if len(r.History) != 0 {
		t.Fatalf("a first attempt that completed is stored: %v", r.History)
	}
}

// TestTally_CountedAgainOnlyAfterAnotherWriter: Open counts the failures
// and dead letters again from the records when a commit since this code's
// last was another's (an older sqsonce's), and only then: a file this code
// wrote last, however often opened, is not walked again.
func TestTally_CountedAgainOnlyAfterAnotherWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Claim(ctx, ClaimRequest{Key: "k", Owner: "a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := db.Fail(ctx, Failure{Key: "k", Owner: "a", Err: "timeout 1"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// A count that the records do not hold, written as this code's last
	// commit: only a count from the records takes it away.
	bogus := func(stamp bool) {
		t.Helper()
		raw, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		err = raw.Update(func(tx *bolt.Tx) error {
			g := failGroup{n: 7, last: 1, key: "bogus", reason: "bogus"}
			if err := tx.Bucket(bucketFailGroups).Put(groupKey("bogus"), g.encode()); err != nil {
				return err
			}
			if !stamp {
				return nil
			}
			return tx.Bucket(bucketMeta).Put(metaTallyTx, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	groups := func() map[string]int {
		t.Helper()
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		o, err := db.Overview(ctx, time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, g := range o.Failures {
			m[g.Group] = g.Count
		}
		return m
	}
	bogus(true)
	for i := range 3 {
		if g := groups(); g["bogus"] != 7 || g["timeout #"] != 1 {
			t.Fatalf("open %d after this code's last commit: %v, want the counts as they are (no walk)", i+1, g)
		}
	}
	bogus(false) // another writer's commit
	if g := groups(); g["bogus"] != 0 || g["timeout #"] != 1 || len(g) != 1 {
		t.Fatalf("open after another writer's commit: %v, want the records' counts", g)
	}
}
