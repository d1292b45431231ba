package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// testdata/v1.db was written by the sqsonce that predates flow control
// (ledger schema 1, no flow state), on the clock below with a retention of
// 24 hours: "done" complete with a result, "failed" failed twice
// retryably, "perm" failed permanently, "running" in progress under "a".
var v1Written = time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)

// TestUpgrade_V1File: a file made before flow control opens, is given the
// flow buckets and schema mark, keeps its records, and takes flow state; and
// what this version then leaves in the file is still a file that sqsonce
// reads (checked with a copy of its rules, v1Check).
func TestUpgrade_V1File(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/v1.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	v1Check(t, path)
	raw, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRecFlow) != nil || tx.Bucket(bucketMeta).Get(metaFlowSchema) != nil {
			t.Fatal("testdata/v1.db has flow state: not a file of the older version")
		}
		return nil
	})
	raw.Close()

	now := v1Written
	ctx := context.Background()
	db, err := Open(path, Options{Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := db.FlowSchema(ctx); err != nil || v != FlowSchemaVersion {
		t.Fatalf("flow schema after the upgrade: %d, %v", v, err)
	}
	for key, want := range map[string]struct {
		state     State
		attempts  int
		permanent bool
		lastError string
	}{
		"done":    {StateComplete, 1, false, ""},
		"failed":  {StateFailed, 2, false, "503 from upstream"},
		"perm":    {StateFailed, 1, true, "bad card"},
		"running": {StateInProgress, 1, false, ""},
	} {
		r, err := db.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want.state || r.Attempts != want.attempts || r.Permanent != want.permanent || r.LastError != want.lastError ||
			r.OwnFailures != 0 || r.OutageFailures != 0 || !r.DeadLettered.IsZero() {
			t.Fatalf("%s after the upgrade: %+v", key, r)
		}
	}
	// Flow state on the old records and beside them.
	if c, err := db.Claim(ctx, ClaimRequest{Key: "failed", Owner: "c", Lease: time.Minute, Fingerprint: []byte("fp")}); err != nil || c.Outcome != Claimed {
		t.Fatalf("claim of an old failed record: %+v, %v", c, err)
	}
	if err := db.Fail(ctx, Failure{Key: "failed", Owner: "c", Err: "503", Outage: true}); err != nil {
		t.Fatal(err)
	}
	if errs := db.MarkDeadLettered(ctx, []DeadLetter{{Key: "perm", Owner: "x", Reason: "bad card 4242", CopyID: "copy-1"}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := db.PutFlow(ctx, FlowDoc{Scope: "q", Data: []byte("paused")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.PutProcess(ctx, Process{ID: "host/1/x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if r, err := db.Get(ctx, "failed"); err != nil || r.OutageFailures != 1 || r.OwnFailures != 0 || r.Attempts != 3 {
		t.Fatalf("failed after an outage: %+v, %v", r, err)
	}
	st, err := db.Stats(ctx)
	if err != nil || st.Complete != 1 || st.Failed != 1 || st.FailedPermanently != 1 || st.InProgress != 1 {
		t.Fatalf("stats after the upgrade: %+v, %v", st, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The older sqsonce still reads the file: its schema, its records,
	// its indexes and counters.
	v1Check(t, path)

	// A record removed by the older sqsonce (forget: its record and index
	// entries, not the flow entry it does not know) and made anew by it
	// (another FirstSeen): its flow fields do not come back, and the next
	// sweep takes the stale entry and its count away.
	raw, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		recs := tx.Bucket(bucketRecords)
		old, err := decodeRecord("perm", recs.Get([]byte("perm")))
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketExpiry).Delete(indexKey(old.Expires, "perm")); err != nil {
			return err
		}
		later := now.Add(time.Minute)
		fresh := Record{Key: "perm", State: StateInProgress, Attempts: 1, Owner: "old", LeaseExpiry: later.Add(time.Minute),
			FirstSeen: later, Claimed: later, Updated: later, Expires: later.Add(24 * time.Hour)}
		if err := recs.Put([]byte("perm"), fresh.encode(nil)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketExpiry).Put(indexKey(fresh.Expires, "perm"), nil); err != nil {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		for k, delta := range map[int]int64{classFailedPermanently: -1, classInProgress: 1} {
			n := int64(readCounter(meta, counterKeys[k])) + delta
			if err := meta.Put(counterKeys[k], binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketInFlight).Put(indexKey(fresh.Claimed, "perm"), nil)
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	db, err = Open(path, Options{Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r, err := db.Get(ctx, "perm"); err != nil || r.Owner != "old" || !r.DeadLettered.IsZero() || r.DeadLetterCopyID != "" {
		t.Fatalf("a record made anew by the older version: %+v, %v", r, err)
	}
	// The older version wrote the file since this one: Open counted
	// the marks again, without the stale one.
	if c, _ := db.DeadLetterCounts(ctx); len(c) != 0 {
		t.Fatalf("counts before the sweep: %v, want none: Open counts again after another version wrote the file", c)
	}
	if _, err := db.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.DeadLetterCounts(ctx); len(c) != 0 {
		t.Fatalf("counts after the sweep: %v", c)
	}
	if r, err := db.Get(ctx, "failed"); err != nil || r.OutageFailures != 1 {
		t.Fatalf("a record's flow fields after the sweep: %+v, %v", r, err)
	}
}

// v1Check opens path as the sqsonce before flow control does (schema
// version, buckets) and checks that it can read what is there: every record
// decodes with its decoder (v1DecodeRecord, a copy), and the indexes and
// counters it reads agree with the records.
func v1Check(t *testing.T, path string) {
	t.Helper()
	raw, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	err = raw.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			return fmt.Errorf("no meta bucket")
		}
		if v := meta.Get([]byte("schema")); len(v) != 8 || binary.BigEndian.Uint64(v) > 1 {
			return fmt.Errorf("schema %x: the older sqsonce refuses it", v)
		}
		for _, name := range []string{"records", "expiry", "inflight"} {
			if tx.Bucket([]byte(name)) == nil {
				return fmt.Errorf("no %s bucket", name)
			}
		}
		counts := map[string]uint64{}
		expiry, inflight := tx.Bucket([]byte("expiry")), tx.Bucket([]byte("inflight"))
		err := tx.Bucket([]byte("records")).ForEach(func(k, v []byte) error {
			r, err := v1DecodeRecord(string(k), v)
			if err != nil {
				return err
			}
			if expiry.Get(indexKey(r.Expires, r.Key)) == nil {
				return fmt.Errorf("%q: no expiry index entry", k)
			}
			if (r.State == StateInProgress) != (inflight.Get(indexKey(r.Claimed, r.Key)) != nil) {
				return fmt.Errorf("%q: in-flight index entry does not match state %s", k, r.State)
			}
			switch {
			case r.State == StateInProgress:
				counts["count.in_progress"]++
			case r.State == StateComplete:
				counts["count.complete"]++
			case r.Permanent:
				counts["count.failed_permanently"]++
			default:
				counts["count.failed"]++
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range []string{"count.in_progress", "count.complete", "count.failed", "count.failed_permanently"} {
			got := uint64(0)
			if v := meta.Get([]byte(k)); len(v) == 8 {
				got = binary.BigEndian.Uint64(v)
			}
			if got != counts[k] {
				return fmt.Errorf("%s is %d, the records say %d", k, got, counts[k])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read as the older sqsonce reads it: %v", err)
	}
}

// v1DecodeRecord is the decoder of records of the sqsonce before flow
// control, kept as it was: it refuses any version but 1 and any trailing
// byte, so that a record with more fields would be unreadable to it.
func v1DecodeRecord(key string, b []byte) (Record, error) {
	d := v1Decoder{b: b}
	r := Record{Key: key}
	version := d.byte()
	if d.err == nil && version != 1 {
		return Record{}, fmt.Errorf("record %q has version %d", key, version)
	}
	r.State = State(d.byte())
	flags := d.byte()
	r.Permanent = flags&1 != 0
	r.Attempts = int(d.uvarint(1 << 31))
	for _, p := range [...]*time.Time{&r.LeaseExpiry, &r.FirstSeen, &r.Claimed, &r.Updated, &r.Completed, &r.Expires} {
		if n := d.varint(); n != 0 {
			*p = time.Unix(0, n)
		}
	}
	r.Fingerprint = d.bytes(64)
	r.Owner = string(d.bytes(256))
	r.LastError = string(d.bytes(1024))
	r.MessageID = string(d.bytes(256))
	r.Result = d.bytes(4096)
	if d.err == nil && (r.State < 1 || r.State > 3) {
		d.err = fmt.Errorf("state %d", r.State)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Record{}, fmt.Errorf("decode record %q: %v", key, d.err)
	}
	return r, nil
}

type v1Decoder struct {
	b   []byte
	err error
}

func (d *v1Decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		if d.err == nil {
			d.err = fmt.Errorf("truncated")
		}
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *v1Decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > max {
		d.err = fmt.Errorf("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *v1Decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *v1Decoder) bytes(max int) []byte {
	n := d.uvarint(uint64(max))
	if d.err != nil || n == 0 {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = fmt.Errorf("truncated string")
		return nil
	}
	s := bytes.Clone(d.b[:n])
	d.b = d.b[n:]
	return s
}
